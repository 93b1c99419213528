package generate

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TopProbs agrees with the full softmax, and a step over a large
// vocabulary allocates nothing sized by it (the old full sort allocated
// 16 bytes a token: 4 MiB here).
func TestTopProbsPartialSelection(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 1<<18)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	p := Softmax(logits, 1)
	top := TopProbs(logits, 5)
	require.Len(t, top, 5)
	for i, tp := range top {
		assert.InDelta(t, p[tp.ID], tp.Prob, 1e-12)
		for id, q := range p {
			if id != tp.ID && (q > tp.Prob || (i > 0 && q == tp.Prob && id < tp.ID)) {
				found := false
				for _, u := range top[:i] {
					found = found || u.ID == id
				}
				require.True(t, found, "token %d (p %g) outranks %d (p %g) but is not above it", id, q, tp.ID, tp.Prob)
			}
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 4 {
		TopProbs(logits, 100)
	}
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10), "bytes allocated by 4 calls over %d logits", len(logits))
}
