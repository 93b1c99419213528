package conv1d_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/reference"
)

// refTol bounds ‖Chunked − float64 reference‖/‖reference‖: a four-term
// float32 sum (a few 2^-24 relative) and vecmath's SiLU (≤ 6e-7 per value)
// give ≤ 3e-7 seen; an indexing or state error is O(1).
const refTol = 1e-6

// relL2 is ‖got − want‖/‖want‖ against a float64 reference.
func relL2(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	return math.Sqrt(num / den)
}

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
						require.NoError(t, conv1d.Chunked{}.Forward(y, in.X, tt, c, in.W, k, state))
						assert.LessOrEqual(t, relL2(y, wantY), refTol, "K=%d C=%d T=%d", k, c, tt)
						for i, s := range state {
							require.Equal(t, wantState[i], float64(s), "state K=%d C=%d T=%d", k, c, tt)
						}

						// The same sequence in two calls, the state carried:
						// the same bits.
						cut := tt / 2
						y2 := make([]float32, tt*c)
						state2 := append([]float32(nil), in.State...)
						require.NoError(t, conv1d.Chunked{}.Forward(y2[:cut*c], in.X[:cut*c], cut, c, in.W, k, state2))
						require.NoError(t, conv1d.Chunked{}.Forward(y2[cut*c:], in.X[cut*c:], tt-cut, c, in.W, k, state2))
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
func TestSelectedKernels(t *testing.T) {
	info := conv1d.KernelInfo()
	lv := cpu.Selected().String()
	assert.True(t, strings.HasPrefix(info, "conv1d:"+lv+" "), "%s at level %s", info, lv)
	assert.Contains(t, info, "vecmath:"+lv)
	if want := os.Getenv(cpu.EnvVar); want != "" {
		assert.Equal(t, want, lv, "%s was not applied", cpu.EnvVar)
	}
}

func TestForcedLevel(t *testing.T) {
	if os.Getenv(cpu.EnvVar) != "" {
		t.Skip("already a child run")
	}
	for _, l := range cpu.Supported() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSelectedKernels$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s", cpu.EnvVar, l))
		out, err := cmd.CombinedOutput()
		if errors.Is(err, syscall.ENOEXEC) {
			t.Skipf("cannot run the test binary as a child here (an emulated GOARCH?): %v", err)
		}
		require.NoError(t, err, "%s=%s:\n%s", cpu.EnvVar, l, out)
		assert.Contains(t, string(out), "--- PASS: TestSelectedKernels", "%s=%s", cpu.EnvVar, l)
	}
}
