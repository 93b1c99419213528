package reference

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/conv1d"
)

// Each output is a K-term sum followed by SiLU, so float32 gets within a few
// ulps (≈1e-7 relative); 1e-6 leaves an order of magnitude of margin while
// still failing on any wrong tap, shift or state row.
func TestCausalConvSiLUMatchesNaive(t *testing.T) {
	for _, tc := range []struct{ t, c, k int }{{70, 40, 4}, {3, 10, 4}, {1, 16, 4}, {9, 5, 2}} {
		r := rand.New(rand.NewPCG(4, uint64(tc.t)))
		x := randn(r, tc.t*tc.c, 1)
		w := randn(r, tc.c*tc.k, 0.5)
		s0 := randn(r, tc.k*tc.c, 1)
		y32 := make([]float32, tc.t*tc.c)
		s32 := append([]float32(nil), s0...)
		require.NoError(t, conv1d.Naive{}.Forward(y32, x, w, conv1d.Dims{T: tc.t, C: tc.c, K: tc.k}, s32))
		y64 := make([]float64, len(y32))
		s64 := Widen(s0)
		require.NoError(t, CausalConvSiLU(y64, Widen(x), tc.t, tc.c, Widen(w), tc.k, s64))
		e := RelL2(y32, y64)
		t.Logf("T=%d C=%d K=%d: y rel L2 %.2e", tc.t, tc.c, tc.k, e)
		assert.Less(t, e, 1e-6)
		// The state is a copy of inputs: it must match exactly.
		assert.Equal(t, s32, Narrow(s64), "final state")
	}
}

// An impulse at t=0 with a zero state reads the taps backwards: tap K−1
// multiplies the current token, so y[t] = SiLU(w[K−1−t]).
func TestCausalConvSiLUImpulse(t *testing.T) {
	const k = 4
	w := []float64{0.1, -0.2, 0.3, 0.4} // one channel
	x := []float64{1, 0, 0, 0, 0}
	y := make([]float64, len(x))
	state := make([]float64, k)
	require.NoError(t, CausalConvSiLU(y, x, len(x), 1, w, k, state))
	want := []float64{SiLU(0.4), SiLU(0.3), SiLU(-0.2), SiLU(0.1), 0}
	assert.InDeltaSlice(t, want, y, 1e-15)
	assert.Equal(t, []float64{0, 0, 0, 0}, state, "the impulse has left the window")
}

// Splitting a sequence anywhere and carrying the state gives the same
// outputs as one call (prefill + decode are the same kernel).
func TestCausalConvSiLUSplit(t *testing.T) {
	const tt, c, k = 11, 3, 4
	r := rand.New(rand.NewPCG(5, 5))
	x, w := Widen(randn(r, tt*c, 1)), Widen(randn(r, c*k, 0.5))
	whole := make([]float64, tt*c)
	require.NoError(t, CausalConvSiLU(whole, x, tt, c, w, k, make([]float64, k*c)))
	for _, cut := range []int{0, 1, 2, 5, 10} {
		state := make([]float64, k*c)
		parts := make([]float64, tt*c)
		require.NoError(t, CausalConvSiLU(parts[:cut*c], x[:cut*c], cut, c, w, k, state))
		require.NoError(t, CausalConvSiLU(parts[cut*c:], x[cut*c:], tt-cut, c, w, k, state))
		assert.Equal(t, whole, parts, "cut at %d", cut)
	}
}

func TestCausalConvSiLUErrors(t *testing.T) {
	assert.ErrorContains(t, CausalConvSiLU(nil, nil, 1, 0, nil, 4, nil), "bad dims")
	err := CausalConvSiLU(make([]float64, 2), make([]float64, 2), 1, 2, make([]float64, 7), 4, make([]float64, 8))
	assert.ErrorContains(t, err, "w has 7 values, want 8")
}
