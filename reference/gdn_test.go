package reference

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/gateddelta"
)

// gdnInputs draws a problem through NewGDNInputs (the one input contract)
// with a non-zero initial state.
func gdnInputs(r *rand.Rand, d gateddelta.Dims) (q, k, v, g, beta, state []float32) {
	in, err := NewGDNInputs(r.Uint64(), d, GDNOptions{WithState: true})
	if err != nil {
		panic(err)
	}
	return in.Q, in.K, in.V, in.G, in.Beta, in.State
}

func randn(r *rand.Rand, n int, std float64) []float32 { return Normals(r, n, std) }

// The float32 naive kernel must agree with the float64 reference to within
// float32 rounding. Each output is a d_k-term dot product with a state that
// is itself a decayed sum over earlier tokens; with unit-norm keys the
// recurrence is contractive, so rounding errors (2^-24 ≈ 6e-8 per op) do
// not compound: we measure about 1e-7, and allow 2e-6 (~1e-6 relative L2,
// the usual float32 bar, with a factor two for other shapes and machines).
func TestGatedDeltaRuleMatchesNaive(t *testing.T) {
	for _, d := range []gateddelta.Dims{
		{T: 70, NK: 2, NV: 4, DK: 16, DV: 24}, // crosses a 64-token chunk, GQA ratio 2
		{T: 33, NK: 1, NV: 3, DK: 32, DV: 8},
		{T: 1, NK: 2, NV: 2, DK: 8, DV: 8}, // decode step
	} {
		r := rand.New(rand.NewPCG(1, uint64(d.T)))
		q, k, v, g, beta, s0 := gdnInputs(r, d)
		out32 := make([]float32, d.T*d.NV*d.DV)
		s32 := append([]float32(nil), s0...)
		require.NoError(t, gateddelta.Naive{}.Forward(out32, q, k, v, g, beta, d, s32))

		out64 := make([]float64, len(out32))
		s64 := Widen(s0)
		require.NoError(t, GatedDeltaRule(out64, Widen(q), Widen(k), Widen(v), Widen(g), Widen(beta), d, s64))

		eo, es := RelL2(out32, out64), RelL2(s32, s64)
		t.Logf("%+v: out rel L2 %.2e, state rel L2 %.2e", d, eo, es)
		assert.Less(t, eo, 2e-6, "out")
		assert.Less(t, es, 2e-6, "final state")
	}
}

// A two-step scalar case worked by hand (d_k = d_v = 1):
//
//	t=0: S′ = 0.5·0.5 = 0.25; δ = 0.5·(2 − 0.25) = 0.875; S = 1.125; o = 0.7·1.125
//	t=1: S′ = 1.125 (g=0);    δ = 1·(−1 − 1.125) = −2.125; S = −1; o = −1
//
// It pins the order of operations: decay before the update, read after it.
func TestGatedDeltaRuleByHand(t *testing.T) {
	d := gateddelta.Dims{T: 2, NK: 1, NV: 1, DK: 1, DV: 1}
	out := make([]float64, 2)
	state := []float64{0.5}
	require.NoError(t, GatedDeltaRule(out, []float64{0.7, 1}, []float64{1, 1}, []float64{2, -1},
		[]float64{math.Log(0.5), 0}, []float64{0.5, 1}, d, state))
	assert.InDeltaSlice(t, []float64{0.7875, -1}, out, 1e-15)
	assert.InDelta(t, -1, state[0], 1e-15)
}

// With α = 1 and β = 1 one step is an exact associative-memory write: the
// state then returns v for the key k, and is unchanged along every
// direction orthogonal to k. (Tolerance: float64 rounding of a few dozen
// operations on O(1) values.)
func TestGatedDeltaRuleWritesKeyValue(t *testing.T) {
	const dk, dv = 4, 3
	d := gateddelta.Dims{T: 1, NK: 1, NV: 1, DK: dk, DV: dv}
	r := rand.New(rand.NewPCG(2, 2))
	s0 := Widen(randn(r, dk*dv, 1))
	state := append([]float64(nil), s0...)
	k := []float64{0.5, 0.5, 0.5, 0.5}   // unit norm
	u := []float64{0.5, -0.5, 0.5, -0.5} // orthogonal to k
	v := []float64{3, -1, 2}
	out := make([]float64, dv)
	require.NoError(t, GatedDeltaRule(out, k, k, v, []float64{0}, []float64{1}, d, state))
	read := func(s, x []float64) []float64 {
		y := make([]float64, dv)
		for i := 0; i < dk; i++ {
			for c := 0; c < dv; c++ {
				y[c] += x[i] * s[i*dv+c]
			}
		}
		return y
	}
	assert.InDeltaSlice(t, v, read(state, k), 1e-12, "Sᵀk must be v after the write")
	assert.InDeltaSlice(t, v, out, 1e-12, "q = k reads back v")
	assert.InDeltaSlice(t, read(s0, u), read(state, u), 1e-12, "directions ⊥ k are untouched")
}

// Value head j reads key head j/(NV/NK): two value heads sharing one key
// head must equal the same problem with the key head duplicated.
func TestGatedDeltaRuleHeadMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	grouped := gateddelta.Dims{T: 5, NK: 1, NV: 2, DK: 4, DV: 3}
	q, k, v, g, beta, s0 := gdnInputs(r, grouped)
	outG := make([]float64, 5*2*3)
	require.NoError(t, GatedDeltaRule(outG, Widen(q), Widen(k), Widen(v), Widen(g), Widen(beta), grouped, Widen(s0)))

	dup := func(x []float32) []float64 { // [T, 1, DK] → [T, 2, DK]
		out := make([]float64, 0, 2*len(x))
		for t := 0; t < 5; t++ {
			row := Widen(x[t*4 : (t+1)*4])
			out = append(append(out, row...), row...)
		}
		return out
	}
	full := gateddelta.Dims{T: 5, NK: 2, NV: 2, DK: 4, DV: 3}
	outF := make([]float64, 5*2*3)
	require.NoError(t, GatedDeltaRule(outF, dup(q), dup(k), Widen(v), Widen(g), Widen(beta), full, Widen(s0)))
	assert.Equal(t, outF, outG)
}

func TestGatedDeltaRuleErrors(t *testing.T) {
	d := gateddelta.Dims{T: 2, NK: 2, NV: 3, DK: 2, DV: 2}
	err := GatedDeltaRule(nil, nil, nil, nil, nil, nil, d, nil)
	assert.ErrorContains(t, err, "not a multiple")
	d.NV = 4
	err = GatedDeltaRule(make([]float64, 16), make([]float64, 8), make([]float64, 8), make([]float64, 16),
		make([]float64, 8), make([]float64, 7), d, make([]float64, 16))
	assert.ErrorContains(t, err, "beta has 7 values, want 8")
	assert.Error(t, L2Normalize(make([]float64, 5), 2, 0))
}
