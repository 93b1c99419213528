package main

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bench"
)

// benchMemCase is one op of TestBenchMemoryEstimatesHold: its shape, the
// sizes it is measured at (the first under -short) and the flag they set.
type benchMemCase struct {
	op, shape string
	sizes     []int
	flag      string   // --seq, or --states for decode-core (whose T changes nothing)
	extra     []string // more flags
	// baseOp, if set, is the op whose 8-token run is the baseline: conv
	// and decode-core measure the copy rate first, 128 MiB that the
	// cases reuse once collected, so they are measured over 128 MiB
	// against an op that does not.
	baseOp string
}

// benchMemCases covers every op bench has; the sizes make each case's
// memory tens to hundreds of MiB while a child runs in about a second
// (under 10 MiB, the products' scratch, a constant MiB or two charged at
// its bound, is a fifth of an estimate and the measure noise another).
var benchMemCases = []benchMemCase{
	{op: "conv", shape: "tiny", sizes: []int{100000, 150000, 200000}, flag: "--seq", baseOp: "gdn-core"},
	{op: "gdn-core", shape: "tiny", sizes: []int{20000, 40000, 80000}, flag: "--seq"},
	{op: "gdn-layer", shape: "tiny", sizes: []int{8000, 16000, 32000}, flag: "--seq"},
	{op: "attention-layer", shape: "tiny", sizes: []int{3000, 4000, 6000}, flag: "--seq", extra: []string{"--naive-max-gflop", "1"}},
	{op: "mlp", shape: "tiny", sizes: []int{16000, 32000, 64000}, flag: "--seq"},
	{op: "moe", shape: "tiny-moe", sizes: []int{8000, 16000, 32000}, flag: "--seq"},
	{op: "decoder-layer", shape: "tiny", sizes: []int{8000, 16000, 32000}, flag: "--seq"},
	{op: "decoder-layer-attn", shape: "tiny", sizes: []int{2000, 3000, 4000}, flag: "--seq", extra: []string{"--naive-max-gflop", "1"}},
	{op: "model", shape: "tiny", sizes: []int{4000, 8000, 16000}, flag: "--seq", extra: []string{"--vocab", "2048", "--naive-max-gflop", "1"}},
	{op: "decode", shape: "tiny", sizes: []int{2000, 3000, 4000}, flag: "--seq", extra: []string{"--vocab", "2048", "--naive-max-gflop", "1"}},
	{op: "decode-core", shape: "0.8b", sizes: []int{128, 192, 256}, flag: "--states", baseOp: "gdn-core"},
	{op: "gemm", shape: "tiny", sizes: []int{20000, 40000, 80000}, flag: "--seq"},
}

// Each bench op's case estimate (the refusal's, at a --max-memory nothing
// fits) holds the case's measured peak: the child's VmHWM less that of the
// same command at 8 tokens (the runtime and the weights) is at most the
// estimate and at least 0.8× it, on one backend (about 35 s; one size each
// under -short). The bench bounds the heap to its largest case
// (model.BoundHeap); before, the estimates were 0.03× to 8.2× the peaks.
func TestBenchMemoryEstimatesHold(t *testing.T) {
	measurePeaks(t)
	seen := map[string]bool{}
	for _, c := range benchMemCases {
		seen[c.op] = true
	}
	for _, op := range bench.OpNames() {
		require.True(t, seen[op], "op %s is not measured", op)
	}
	for _, c := range benchMemCases {
		t.Run(c.op, func(t *testing.T) {
			args := func(n int) []string {
				a := []string{"bench", "--op", c.op, "--shape", c.shape, "--backends", "chunked",
					"--reps", "1", "--warmup", "0", "--min-time", "0", c.flag, strconv.Itoa(n)}
				if c.flag != "--seq" {
					a = append(a, "--seq", "8")
				}
				return append(a, c.extra...)
			}
			baseArgs := args(map[bool]int{true: 8, false: 1}[c.flag == "--seq"])
			if c.baseOp != "" {
				baseArgs = []string{"bench", "--op", c.baseOp, "--shape", c.shape, "--backends", "chunked", "--reps", "1", "--warmup", "0", "--min-time", "0", "--seq", "8"}
			}
			base := runChild(t, baseArgs...)
			require.Equal(t, 0, base.code, base.stderr)
			sizes := c.sizes
			if testing.Short() {
				sizes = sizes[:1]
			}
			for _, n := range sizes {
				est := estimateOf(t, args(n)...)
				r := runChild(t, args(n)...)
				require.Equal(t, 0, r.code, r.stderr)
				peak := float64(r.peakKB-base.peakKB) * 1024
				t.Logf("%s %s %d: estimate %.1f MiB, peak %.1f MiB (%.2f×), %v", c.op, c.flag, n, est/(1<<20), peak/(1<<20), est/peak, r.took.Round(1e7))
				assert.GreaterOrEqual(t, est, peak, "%s %s %d: the estimate is under the peak", c.op, c.flag, n)
				assert.LessOrEqual(t, est, 1.25*peak, "%s %s %d: the estimate is over 1.25× the peak", c.op, c.flag, n)
			}
		})
	}
}
