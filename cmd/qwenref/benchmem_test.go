package main

import (
	"os"
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
}

// benchMemCases covers every op bench has; the sizes make each case's
// memory tens to hundreds of MiB while a child runs in about a second.
var benchMemCases = []benchMemCase{
	{op: "conv", shape: "tiny", sizes: []int{50000, 100000, 200000}, flag: "--seq"},
	{op: "gdn-core", shape: "tiny", sizes: []int{20000, 40000, 80000}, flag: "--seq"},
	{op: "gdn-layer", shape: "tiny", sizes: []int{8000, 16000, 32000}, flag: "--seq"},
	{op: "attention-layer", shape: "tiny", sizes: []int{2000, 3000, 4000}, flag: "--seq", extra: []string{"--naive-max-gflop", "1"}},
	{op: "mlp", shape: "tiny", sizes: []int{16000, 32000, 64000}, flag: "--seq"},
	{op: "moe", shape: "tiny-moe", sizes: []int{8000, 16000, 32000}, flag: "--seq"},
	{op: "decoder-layer", shape: "tiny", sizes: []int{8000, 16000, 32000}, flag: "--seq"},
	{op: "decoder-layer-attn", shape: "tiny", sizes: []int{2000, 3000, 4000}, flag: "--seq", extra: []string{"--naive-max-gflop", "1"}},
	{op: "model", shape: "tiny", sizes: []int{1000, 2000, 4000}, flag: "--seq", extra: []string{"--vocab", "2048", "--naive-max-gflop", "1"}},
	{op: "decode", shape: "tiny", sizes: []int{1000, 2000, 4000}, flag: "--seq", extra: []string{"--vocab", "2048", "--naive-max-gflop", "1"}},
	{op: "decode-core", shape: "0.8b", sizes: []int{64, 128, 256}, flag: "--states"},
	{op: "gemm", shape: "tiny", sizes: []int{20000, 40000, 80000}, flag: "--seq"},
}

// Each bench op's case estimate (the refusal's, at a --max-memory nothing
// fits) holds the case's measured peak: the child's VmHWM less that of the
// same command at the smallest size (the runtime, the weights, the copy-rate
// measurement) is at most the estimate and at least 0.8× it, on one backend.
func TestBenchMemoryEstimatesHold(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is in every peak")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("VmHWM is read from /proc (Linux)")
	}
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
			base := runChild(t, args(map[bool]int{true: 8, false: 1}[c.flag == "--seq"])...)
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
