package conv1d_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath/leveltest"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/reference"
)

// refTol bounds ‖Chunked − float64 reference‖/‖reference‖: a four-term
// float32 sum (a few 2^-24 relative) and vecmath's SiLU (≤ 6e-7 per value)
// give ≤ 3e-7 seen; an indexing or state error is O(1).
const refTol = 1e-6

// TestLevelsMatchReference runs Chunked at every kernel level this CPU has
// against the float64 conv: odd channel counts (ragged vector tails), T
// from 1 (decode) past the four-row blocks, K = 4 (assembly) and K = 3,
// and state carried across calls.
func TestLevelsMatchReference(t *testing.T) {
	for _, l := range cpu.Supported() {
		t.Run(l.String(), func(t *testing.T) {
			defer conv1d.UseLevel(l)()
			for _, k := range []int{3, 4} {
				for _, c := range []int{1, 7, 16, 37, 1000} {
					for _, tt := range []int{1, 2, 3, 4, 5, 7, 8, 9, 31, 130} {
						in, err := reference.NewConvInputs(uint64(1000*c+tt), tt, c, k, true)
						require.NoError(t, err)
						wantY, wantState, err := in.Reference()
						require.NoError(t, err)
						y := make([]float32, tt*c)
						state := append([]float32(nil), in.State...)
						require.NoError(t, conv1d.Chunked{}.Forward(y, in.X, in.W, conv1d.Dims{T: tt, C: c, K: k}, state))
						assert.LessOrEqual(t, reference.RelL2(y, wantY), refTol, "K=%d C=%d T=%d", k, c, tt)
						for i, s := range state {
							require.Equal(t, wantState[i], float64(s), "state K=%d C=%d T=%d", k, c, tt)
						}

						// The same sequence in two calls, the state carried:
						// the same bits.
						cut := tt / 2
						y2 := make([]float32, tt*c)
						state2 := append([]float32(nil), in.State...)
						require.NoError(t, conv1d.Chunked{}.Forward(y2[:cut*c], in.X[:cut*c], in.W, conv1d.Dims{T: cut, C: c, K: k}, state2))
						require.NoError(t, conv1d.Chunked{}.Forward(y2[cut*c:], in.X[cut*c:], in.W, conv1d.Dims{T: tt - cut, C: c, K: k}, state2))
						assert.Equal(t, y, y2, "split at %d: K=%d C=%d T=%d", cut, k, c, tt)
						assert.Equal(t, state, state2)
					}
				}
			}
		})
	}
}

// TestSelectedKernels checks that Chunked runs the level internal/cpu
// selected; TestForcedLevel runs it under each QWENREF_CPU value.
func TestSelectedKernels(t *testing.T) { leveltest.CheckSelected(t, "conv1d", conv1d.KernelInfo()) }

func TestForcedLevel(t *testing.T) { leveltest.RunForced(t, "TestSelectedKernels") }
