package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// relL2_64 is ‖got−want‖/‖want‖ in float64 (‖got‖ when want is zero).
func relL2_64(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
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
