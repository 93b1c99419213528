package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every op's case at a --seq too long for --max-memory is refused before
// anything is allocated (it used to build its inputs and die in Go's
// out-of-memory trace), naming the op, the --seq and the limit.
func TestCaseOverLimitRefusedFirst(t *testing.T) {
	for _, op := range Ops() {
		if op.Name == "moe" || op.Name == "decode-core" {
			continue // the tiny shape is dense; decode-core runs one token at any --seq
		}
		o := tinyOptions(t, op.Name, "chunked")
		o.Seqs = []int{8, 1 << 24}
		_, err := Run(o)
		require.Error(t, err, op.Name)
		assert.ErrorContains(t, err, "op "+op.Name+" at --seq 16777216 needs about", op.Name)
		assert.ErrorContains(t, err, "over the 1 GiB limit (--max-memory)", op.Name)
	}
}
