package conv1d

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// Both kernels must satisfy the frame's interface.
var (
	_ Kernel = Naive{}
	_ Kernel = Chunked{}
)

// chunkedTol bounds ‖Chunked − Naive‖/‖Naive‖. Both form the same K-term
// sum in the same order; they differ only in fused versus separate
// multiply-add rounding (≤ K half-ulps, 2^-24 each) and in the SiLU:
// Naive's is float64 math.Exp, Chunked's a float32 polynomial good to a few
// ulps. That is a few times 6e-8 per value (≤ 8e-8 seen), so 1e-6 leaves
// over 10× margin and still fails on any indexing or state mistake, which
// errs by O(1).
const chunkedTol = 1e-6

// problem is one random convolution call with a non-zero initial state.
type problem struct {
	t, c, k int
	x, w    []float32
	state   []float32
}

func newProblem(rng *rand.Rand, t, c, k int) problem {
	p := problem{t: t, c: c, k: k,
		x: randn(rng, t*c), w: randn(rng, c*k), state: randn(rng, k*c)}
	for i := range p.w {
		p.w[i] *= 0.5 // typical |u| ~ 1, where SiLU is far from linear
	}
	return p
}

func randn(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

// run applies kern and returns the output and the final state (the
// problem's own slices are not touched).
func (p problem) run(t *testing.T, kern Kernel) (y, state []float32) {
	t.Helper()
	y = make([]float32, p.t*p.c)
	for i := range y {
		y[i] = float32(math.NaN()) // every output must be written (callers lend unzeroed buffers)
	}
	state = append([]float32(nil), p.state...)
	require.NoError(t, kern.Forward(y, p.x, p.w, Dims{T: p.t, C: p.c, K: p.k}, state))
	return y, state
}

func TestChunkedMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range []int{2, 4} {
		// 37 and 1000 channels are not multiples of 16; 3000 spans several
		// channel blocks, so the parallel path runs too.
		for _, c := range []int{37, 1000, 3000} {
			for _, tt := range []int{1, 3, 4, 5, 64, 1000} {
				if c == 3000 && tt == 1000 && testing.Short() {
					continue
				}
				t.Run(fmt.Sprintf("K=%d/C=%d/T=%d", k, c, tt), func(t *testing.T) {
					p := newProblem(rng, tt, c, k)
					yN, sN := p.run(t, Naive{})
					yC, sC := p.run(t, Chunked{})
					assert.LessOrEqual(t, tensor.RelL2(yC, yN), chunkedTol, "outputs")
					// The state is copied, never computed: it must be exact.
					assert.Equal(t, sN, sC, "state")
				})
			}
		}
	}
}

// TestNaiveByHand checks Naive against sums written out for K = 2, C = 1,
// so the reference itself is anchored to the spec formula.
func TestNaiveByHand(t *testing.T) {
	w := []float32{0.5, 2}   // w[0,1] = 2 multiplies the current token
	state := []float32{7, 3} // m[-2] = 7 (never read), m[-1] = 3
	x := []float32{1, -1, 4}
	y := make([]float32, 3)
	require.NoError(t, Naive{}.Forward(y, x, w, Dims{T: 3, C: 1, K: 2}, state))
	want := []float32{SiLU(0.5*3 + 2*1), SiLU(0.5*1 + 2*-1), SiLU(0.5*-1 + 2*4)}
	assert.Equal(t, want, y)
	assert.Equal(t, []float32{-1, 4}, state)
}

func TestStreamingEquivalence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const tt, c, k = 40, 53, 4
	for _, kern := range []Kernel{Naive{}, Chunked{}} {
		p := newProblem(rng, tt, c, k)
		yAll, sAll := p.run(t, kern)
		// Splits shorter than K (1, 2, 3 tokens) exercise the state
		// shifting within itself; 0-token calls must be no-ops.
		for _, cuts := range [][]int{{1}, {3, 4}, {0, 2, 2, 9, 25}, {1, 2, 3, 4, 5, 6, 39}} {
			y := make([]float32, tt*c)
			state := append([]float32(nil), p.state...)
			prev := 0
			for _, cut := range append(cuts, tt) {
				require.NoError(t, kern.Forward(y[prev*c:cut*c], p.x[prev*c:cut*c], p.w, Dims{T: cut - prev, C: c, K: k}, state))
				prev = cut
			}
			// Each output is the same K-term sum from the same inputs, so
			// splitting must not change a single bit.
			assert.Equal(t, yAll, y, "%T split at %v", kern, cuts)
			assert.Equal(t, sAll, state, "%T split at %v", kern, cuts)
		}
	}
}

func TestZeroStateIsSequenceStart(t *testing.T) {
	// With a zero state the first outputs see zero padding (docs/spec.md §3.3:
	// m[τ<0] = 0), so y[0,c] = SiLU(w[c,K−1]·x[0,c]).
	rng := rand.New(rand.NewPCG(5, 6))
	const c, k = 19, 4
	p := newProblem(rng, 2, c, k)
	p.state = make([]float32, k*c)
	for _, kern := range []Kernel{Naive{}, Chunked{}} {
		y, _ := p.run(t, kern)
		for ch := range c {
			assert.InDelta(t, SiLU(p.w[ch*k+k-1]*p.x[ch]), y[ch], 1e-6, "%T c=%d", kern, ch)
		}
	}
}

func TestSiLU(t *testing.T) {
	cases := []struct{ in, want float64 }{
		{0, 0},
		{1, 1 / (1 + math.Exp(-1))},
		{-1, -1 / (1 + math.Exp(1))},
		{20, 20 / (1 + math.Exp(-20))},
		{-20, -20 / (1 + math.Exp(20))},
		{-50, -50 * math.Exp(-50) / (1 + math.Exp(-50))},
		{100, 100},
	}
	for _, tc := range cases {
		got := float64(SiLU(float32(tc.in)))
		// One float32 rounding of a float64 result: 2^-24 relative.
		assert.InDelta(t, tc.want, got, math.Abs(tc.want)*0x1p-24, "SiLU(%v)", tc.in)
	}
	// Far tails: no NaN, and the limits u and 0.
	assert.Equal(t, float32(0), SiLU(-1e30))
	assert.Equal(t, float32(0), SiLU(float32(math.Inf(-1))))
	assert.Equal(t, float32(1e30), SiLU(1e30))
	assert.True(t, math.IsInf(float64(SiLU(float32(math.Inf(1)))), 1))
}

func TestErrors(t *testing.T) {
	ok := func() (y, x, w, s []float32) {
		return make([]float32, 6), make([]float32, 6), make([]float32, 8), make([]float32, 8)
	}
	for _, kern := range []Kernel{Naive{}, Chunked{}} {
		y, x, w, s := ok()
		assert.NoError(t, kern.Forward(y, x, w, Dims{T: 3, C: 2, K: 4}, s))
		assert.Error(t, kern.Forward(y, x, w, Dims{T: 3, C: 0, K: 4}, s), "C = 0")
		assert.Error(t, kern.Forward(y, x, w, Dims{T: -1, C: 2, K: 4}, s), "T < 0")
		assert.Error(t, kern.Forward(y, x, w, Dims{T: 3, C: 2, K: 0}, s), "K = 0")
		assert.Error(t, kern.Forward(y[:5], x, w, Dims{T: 3, C: 2, K: 4}, s), "short y")
		assert.Error(t, kern.Forward(y, x[:4], w, Dims{T: 3, C: 2, K: 4}, s), "short x")
		assert.Error(t, kern.Forward(y, x, w[:6], Dims{T: 3, C: 2, K: 4}, s), "short w")
		assert.Error(t, kern.Forward(y, x, w, Dims{T: 3, C: 2, K: 4}, s[:6]), "short state")
		// T·C wraps to 0: empty x and y must not pass for it.
		assert.ErrorContains(t, kern.Forward(nil, nil, w, Dims{T: 1 << (strconv.IntSize - 2), C: 4, K: 2}, s), "overflow")
		// T = 0 is valid and leaves the state alone.
		s0 := []float32{1, 2, 3, 4, 5, 6, 7, 8}
		assert.NoError(t, kern.Forward(nil, nil, w, Dims{T: 0, C: 2, K: 4}, s0))
		assert.Equal(t, []float32{1, 2, 3, 4, 5, 6, 7, 8}, s0)
	}
}

// Example: one channel, K = 2, starting from a zero state, then a decode
// step that continues from the returned state.
func Example() {
	w := []float32{1, 1} // y[t] = SiLU(m[t−1] + m[t])
	state := make([]float32, 2)
	y := make([]float32, 3)
	_ = Chunked{}.Forward(y, []float32{1, 2, -3}, w, Dims{T: 3, C: 1, K: 2}, state)
	fmt.Printf("prefill y=%.4f state=%v\n", y, state)
	_ = Chunked{}.Forward(y[:1], []float32{3}, w, Dims{T: 1, C: 1, K: 2}, state)
	fmt.Printf("decode  y=%.4f state=%v\n", y[:1], state)
	// Output:
	// prefill y=[0.7311 2.8577 -0.2689] state=[2 -3]
	// decode  y=[0.0000] state=[-3 3]
}
