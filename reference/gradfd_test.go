package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// The finite-difference checks of the float64 backward passes: every
// input's gradient against the five-point stencil of the loss
// L = ⟨dout, out⟩ (+ ⟨dfinal, final state⟩), whose truncation error
// (h⁴ with h = 1e-3) and rounding error (1e-16/h) both sit far below the
// target of 1e-7 relative L2 per tensor.
const fdTarget = 1e-7

// fdGrad returns ∂L/∂x[i] for every i; loss reads x.
func fdGrad(x []float64, loss func() float64) []float64 {
	g := make([]float64, len(x))
	for i := range x {
		x0 := x[i]
		h := 1e-3 * math.Max(1, math.Abs(x0))
		at := func(d float64) float64 { x[i] = x0 + d; return loss() }
		g[i] = (-at(2*h) + 8*at(h) - 8*at(-h) + at(-2*h)) / (12 * h)
		x[i] = x0
	}
	return g
}

// relL2_64 is ‖got−want‖/‖want‖ in float64, with ‖want‖ no less than
// 1e-3: a gradient that is zero (the state's with K = 1, the weights' with
// T = 0) has differences of rounding size only, about 1e-13.
func relL2_64(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	return math.Sqrt(num) / math.Max(math.Sqrt(den), 1e-3)
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// checkFD compares each named analytic gradient with finite differences.
func checkFD(t *testing.T, label string, loss func() float64, pairs map[string][2][]float64) {
	t.Helper()
	for name, p := range pairs {
		fd := fdGrad(p[0], loss)
		e := relL2_64(p[1], fd)
		t.Logf("%s d%s: rel L2 %.1e (‖fd‖ %.3g)", label, name, e, math.Sqrt(dot(fd, fd)))
		assert.Less(t, e, fdTarget, "%s d%s", label, name)
	}
}

// gdnFDCases: grouped value heads, a length that crosses the backward's
// 64-token checkpoint, single tokens and an empty call.
var gdnFDCases = []gateddelta.Dims{
	{T: 9, NK: 2, NV: 4, DK: 5, DV: 3},
	{T: 67, NK: 1, NV: 2, DK: 3, DV: 2},
	{T: 1, NK: 1, NV: 3, DK: 4, DV: 4},
	{T: 0, NK: 1, NV: 1, DK: 2, DV: 2},
}

func TestGatedDeltaRuleBackwardFD(t *testing.T) {
	for _, l2 := range []bool{false, true} {
		for ci, d := range gdnFDCases {
			in, err := NewGDNInputs(uint64(ci+1), d, GDNOptions{WithState: true})
			require.NoError(t, err)
			q, k, v, g, b, s0 := Widen(in.Q), Widen(in.K), Widen(in.V), Widen(in.G), Widen(in.Beta), Widen(in.State)
			r := Rand(uint64(ci), 7)
			if l2 { // raw q and k, not unit rows
				q, k = Widen(Normals(r, len(q), 1)), Widen(Normals(r, len(k), 1))
			}
			dout, dfin := Widen(Normals(r, d.T*d.NV*d.DV, 1)), Widen(Normals(r, len(s0), 1))
			fwd, bwd := GatedDeltaRule, GatedDeltaRuleBackward
			if l2 {
				fwd, bwd = GatedDeltaRuleL2, GatedDeltaRuleL2Backward
			}
			loss := func() float64 {
				out, st := make([]float64, len(dout)), append([]float64(nil), s0...)
				require.NoError(t, fwd(out, q, k, v, g, b, d, st))
				return dot(out, dout) + dot(st, dfin)
			}
			gr, err := bwd(q, k, v, g, b, d, s0, dout, dfin)
			require.NoError(t, err)
			checkFD(t, "gdn", loss, map[string][2][]float64{"q": {q, gr.Q}, "k": {k, gr.K}, "v": {v, gr.V},
				"g": {g, gr.G}, "beta": {b, gr.Beta}, "h0": {s0, gr.State}})
		}
	}
}

// Conv cases: shorter than K−1 (the final state holds initial rows, so
// dfinal reaches dh0 directly), exactly K, longer, and K = 1.
func TestCausalConvSiLUBackwardFD(t *testing.T) {
	for ci, tc := range []struct{ t, c, k int }{{2, 3, 4}, {4, 2, 4}, {11, 3, 4}, {5, 2, 1}, {0, 2, 3}} {
		for _, withBias := range []bool{false, true} {
			r := Rand(uint64(ci), 11)
			x, w, s0 := Widen(Normals(r, tc.t*tc.c, 1)), Widen(Normals(r, tc.c*tc.k, 0.5)), Widen(Normals(r, tc.k*tc.c, 1))
			dy, dfin := Widen(Normals(r, tc.t*tc.c, 1)), Widen(Normals(r, tc.k*tc.c, 1))
			var bias []float64
			if withBias {
				bias = Widen(Normals(r, tc.c, 0.5))
			}
			loss := func() float64 {
				y, st := make([]float64, len(dy)), append([]float64(nil), s0...)
				require.NoError(t, CausalConvSiLUBias(y, x, tc.t, tc.c, w, tc.k, bias, st))
				return dot(y, dy) + dot(st, dfin)
			}
			gr, err := CausalConvSiLUBackward(x, tc.t, tc.c, w, tc.k, bias, s0, dy, dfin)
			require.NoError(t, err)
			pairs := map[string][2][]float64{"x": {x, gr.X}, "w": {w, gr.W}, "h0": {s0, gr.State}}
			if withBias {
				pairs["bias"] = [2][]float64{bias, gr.Bias}
			}
			checkFD(t, "conv", loss, pairs)
		}
	}
	// Without a bias the forward is CausalConvSiLU's.
	r := Rand(3, 3)
	x, w, s0 := Widen(Normals(r, 12, 1)), Widen(Normals(r, 12, 0.5)), Widen(Normals(r, 12, 1))
	y1, y2, s1, s2 := make([]float64, 12), make([]float64, 12), append([]float64(nil), s0...), append([]float64(nil), s0...)
	require.NoError(t, CausalConvSiLU(y1, x, 4, 3, w, 4, s1))
	require.NoError(t, CausalConvSiLUBias(y2, x, 4, 3, w, 4, nil, s2))
	assert.Equal(t, y1, y2)
	assert.Equal(t, s1, s2)
}

func TestGatedRMSNormBackwardFD(t *testing.T) {
	r := Rand(5, 5)
	const dim = 6
	x, z, w := Widen(Normals(r, 4*dim, 1)), Widen(Normals(r, 4*dim, 1.5)), Widen(Normals(r, dim, 1))
	dy := Widen(Normals(r, 4*dim, 1))
	loss := func() float64 {
		y, err := GatedRMSNorm(x, z, w, dim, 1e-6)
		require.NoError(t, err)
		return dot(y, dy)
	}
	dx, dz, dw, err := GatedRMSNormBackward(x, z, w, dim, 1e-6, dy)
	require.NoError(t, err)
	checkFD(t, "gated norm", loss, map[string][2][]float64{"x": {x, dx}, "z": {z, dz}, "w": {w, dw}})
}

// Attention cases: GQA with cached keys, a single query, and no gate.
func TestGatedAttentionBackwardFD(t *testing.T) {
	for ci, tc := range []struct {
		d    attention.Dims
		gate bool
	}{
		{attention.Dims{T: 5, S: 8, NH: 4, NKV: 2, D: 3}, true},
		{attention.Dims{T: 1, S: 6, NH: 2, NKV: 1, D: 4}, true},
		{attention.Dims{T: 6, S: 6, NH: 3, NKV: 3, D: 2}, false},
	} {
		d, r := tc.d, Rand(uint64(ci), 13)
		q, k, v := Widen(Normals(r, d.T*d.NH*d.D, 1)), Widen(Normals(r, d.S*d.NKV*d.D, 1)), Widen(Normals(r, d.S*d.NKV*d.D, 1))
		dout := Widen(Normals(r, len(q), 1))
		var gate []float64
		if tc.gate {
			gate = Widen(Normals(r, len(q), 1.5))
		}
		scale := 1 / math.Sqrt(float64(d.D))
		loss := func() float64 {
			out := make([]float64, len(q))
			require.NoError(t, GatedAttention(out, q, k, v, gate, d, scale))
			return dot(out, dout)
		}
		gr, err := GatedAttentionBackward(q, k, v, gate, d, scale, dout)
		require.NoError(t, err)
		pairs := map[string][2][]float64{"q": {q, gr.Q}, "k": {k, gr.K}, "v": {v, gr.V}}
		if tc.gate {
			pairs["gate"] = [2][]float64{gate, gr.Gate}
		}
		checkFD(t, "attention", loss, pairs)
	}
}
