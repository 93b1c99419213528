package attention_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath/leveltest"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/reference"
)

// refTol bounds ‖Chunked − float64 reference‖/‖reference‖, as coreTol does
// against Naive: float32 dot products of D terms (≈ √D·2^-24 relative), a
// polynomial exp good to 4e-7 and block-wise sums give ~1e-6; a wrong mask,
// offset or head mapping errs by O(1).
const refTol = 1e-5

// TestLevelsMatchReference runs Chunked at every kernel level this CPU has
// against the float64 attention: decode (T = 1), S > T (a cached prefix),
// GQA ratios 1, 3 and 6, head dims that fill two registers, one, or none
// (13: the portable fallback), and block sizes that split T and S unevenly.
func TestLevelsMatchReference(t *testing.T) {
	type shape struct{ nh, nkv, d int }
	for _, l := range cpu.Supported() {
		t.Run(l.String(), func(t *testing.T) {
			defer attention.UseLevel(l)()
			for _, sh := range []shape{{2, 2, 16}, {6, 2, 24}, {12, 2, 64}, {3, 1, 13}, {24, 4, 256}} {
				for _, tt := range []int{1, 2, 9, 33} {
					for _, past := range []int{0, 5, 70} {
						d := attention.Dims{T: tt, S: tt + past, NH: sh.nh, NKV: sh.nkv, D: sh.d}
						in, err := reference.NewAttentionInputs(uint64(tt*1000+past), d)
						require.NoError(t, err)
						want, err := in.Reference()
						require.NoError(t, err)
						for _, c := range []attention.Chunked{{}, {BlockQ: 5, BlockK: 7}} {
							out := make([]float32, len(want))
							require.NoError(t, c.Forward(out, in.Q, in.K, in.V, d, in.Scale))
							assert.LessOrEqual(t, reference.RelL2(out, want), refTol, "%+v %+v", d, c)
						}
					}
				}
			}
		})
	}
}

// TestSelectedKernels checks that Chunked runs the level internal/cpu
// selected; TestForcedLevel runs it under each QWENREF_CPU value.
func TestSelectedKernels(t *testing.T) {
	leveltest.CheckSelected(t, "attention", attention.KernelInfo())
}

func TestForcedLevel(t *testing.T) { leveltest.RunForced(t, "TestSelectedKernels") }
