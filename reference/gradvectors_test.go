package reference

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// vecTensor is a vector's tensor by name, widened.
func vecTensor(t *testing.T, v *Vector, name string) []float64 {
	t.Helper()
	for _, x := range v.Tensors {
		if x.Name == name {
			return Widen(x.Data)
		}
	}
	t.Fatalf("no tensor %s", name)
	return nil
}

// passes reports whether got meets the vector's bar for name, logging both.
func passes(t *testing.T, v *Vector, name string, got []float64) bool {
	t.Helper()
	rel, err1 := strconv.ParseFloat(v.Meta["tol."+name+".rel_l2"], 64)
	abs, err2 := strconv.ParseFloat(v.Meta["tol."+name+".max_abs_scaled"], 64)
	require.NoError(t, err1)
	require.NoError(t, err2)
	e := tensor.CompareStage(Narrow(got), Narrow(vecTensor(t, v, name)))
	t.Logf("%s %s %s: rel L2 %.2e (bar %.2e), max-abs %.2e (bar %.2e)", v.Meta["op"], v.Meta["dtype"], name, e.RelL2, rel, e.MaxAbsScaled, abs)
	return e.Within(tensor.Tolerance{RelL2: rel, MaxAbsScaled: abs})
}

func roundedTo(dtype string, x []float64) []float64 {
	y := Narrow(x)
	require.NoError(nil, RoundTo(dtype, y))
	return Widen(y)
}

// A correct float32 backward (the reference's own passes run in float32,
// gdnBackward[float32]) meets every gdn-core bar in every dtype, also
// when it writes the dtype's gradients in that dtype; a dg that went
// through bf16, a missing initial-state gradient, and dq/dk that skip the
// in-op L2 norm's backward each fail.
func TestGradVectorGDN(t *testing.T) {
	for _, dtype := range DTypes {
		for _, l2 := range []bool{false, true} {
			vd := VectorDims{T: 70, NK: 2, NV: 4, DK: 16, DV: 8, DType: dtype, SeqLens: []int{1, 64, 5}}
			v, err := BuildGradVector("gdn-core", vd, 3, false, l2)
			require.NoError(t, err)
			d := gateddelta.Dims{T: 70, NK: 2, NV: 4, DK: 16, DV: 8}
			f := func(n string) []float32 { return Narrow(vecTensor(t, v, n)) }
			q, k := f("q"), f("k")
			if l2 {
				q, k = l2Rows(q, d.DK, float32(1/math.Sqrt(16))), l2Rows(k, d.DK, 1)
			}
			// The float32 pass per sequence.
			sz, at := d.NV*d.DK*d.DV, 0
			got := [6][]float64{}
			for i, n := range []int{1, 64, 5} {
				sd := d
				sd.T = n
				sl := func(x []float32, w int) []float32 { return x[at*w : (at+n)*w] }
				r := gdnBackward(sl(q, 32), sl(k, 32), sl(f("v"), 32), sl(f("g"), 4), sl(f("beta"), 4), sd,
					f("initial_state")[i*sz:(i+1)*sz], sl(f("dout"), 32), f("dfinal_state")[i*sz:(i+1)*sz], nil)
				if l2 {
					r[0] = l2Backward(sl(f("q"), 32), r[0], d.DK, float32(1/math.Sqrt(16)))
					r[1] = l2Backward(sl(f("k"), 32), r[1], d.DK, 1)
				}
				for j := range r {
					got[j] = append(got[j], Widen(r[j])...)
				}
				at += n
			}
			names := []string{"dq", "dk", "dv", "dg", "dbeta", "dinitial_state"}
			for j, n := range names {
				assert.True(t, passes(t, v, n, got[j]), "correct float32 %s", n)
			}
			for _, n := range []string{"dq", "dk", "dv", "dbeta"} {
				assert.True(t, passes(t, v, n, roundedTo(dtype, vecTensor(t, v, n))), "%s written in %s", n, dtype)
			}
			assert.False(t, passes(t, v, "dg", roundedTo("bf16", vecTensor(t, v, "dg"))), "dg through bf16")
			assert.False(t, passes(t, v, "dinitial_state", make([]float64, len(got[5]))), "no dh0")
			if l2 {
				// The core's gradients of q̂ and k̂ passed on as dq and dk.
				w := func(n string) []float64 { return vecTensor(t, v, n) }
				_, _, core, err := GDNPackedBackward(Widen(l2Rows(f("q"), d.DK, float32(1/math.Sqrt(16)))), Widen(l2Rows(f("k"), d.DK, 1)),
					w("v"), w("g"), w("beta"), d, []int{1, 64, 5}, w("initial_state"), w("dout"), w("dfinal_state"), false)
				require.NoError(t, err)
				assert.False(t, passes(t, v, "dq", core.Q), "dq without the L2 norm's backward")
				assert.False(t, passes(t, v, "dk", core.K), "dk without the L2 norm's backward")
			}
		}
	}
}

// Conv over three packed sequences, the middle one shorter than K−1: the
// stored gradients pass when written in the dtype; dweight with one
// sequence's part scaled by 16 fails, and so do dx and dinitial_state
// without the final state's gradient, and a NaN in dweight.
func TestGradVectorConv(t *testing.T) {
	for _, dtype := range DTypes {
		segs := []int{5, 1, 9}
		v, err := BuildGradVector("conv", VectorDims{T: 15, C: 6, K: 4, DType: dtype, SeqLens: segs}, 4, false, false)
		require.NoError(t, err)
		w := func(n string) []float64 { return vecTensor(t, v, n) }
		for _, n := range []string{"y", "final_state", "dx", "dweight", "dinitial_state"} {
			assert.True(t, passes(t, v, n, roundedTo(dtype, w(n))), "%s written in %s", n, dtype)
		}
		// The middle sequence's dW alone, then the whole dW with it ×16.
		_, _, g1, err := ConvPackedBackward(w("x")[5*6:6*6], 1, 6, w("weight"), 4, nil, []int{1}, w("initial_state")[24:48], w("dy")[5*6:6*6], w("dfinal_state")[24:48])
		require.NoError(t, err)
		planted := append([]float64(nil), w("dweight")...)
		for i, x := range g1.W {
			planted[i] += 15 * x
		}
		assert.False(t, passes(t, v, "dweight", planted), "dW ×16 on one sequence")
		_, _, g0, err := ConvPackedBackward(w("x"), 15, 6, w("weight"), 4, nil, segs, w("initial_state"), w("dy"), make([]float64, 3*24))
		require.NoError(t, err)
		assert.False(t, passes(t, v, "dinitial_state", g0.State), "dh0 without the final state's gradient")
		assert.False(t, passes(t, v, "dx", g0.X), "dx without the final state's gradient")
		nan := append([]float64(nil), w("dweight")...)
		nan[len(nan)-1] = math.NaN()
		assert.False(t, passes(t, v, "dweight", nan), "NaN in dW")
	}
}

// Attention with cached keys and the gate: gradients written in the dtype
// pass; a dgate that forgets σ′ (uses σ) and a dk that drops the softmax's
// normalisation term fail.
func TestGradVectorAttention(t *testing.T) {
	for _, dtype := range DTypes {
		v, err := BuildGradVector("attention", VectorDims{T: 6, P: 3, NH: 4, NKV: 2, D: 8, DType: dtype}, 5, false, false)
		require.NoError(t, err)
		w := func(n string) []float64 { return vecTensor(t, v, n) }
		for _, n := range []string{"out", "dq", "dk", "dv", "dgate"} {
			assert.True(t, passes(t, v, n, roundedTo(dtype, w(n))), "%s written in %s", n, dtype)
		}
		bad := append([]float64(nil), w("dgate")...)
		gate := w("gate")
		for i := range bad {
			s := sigmoid(gate[i])
			bad[i] /= 1 - s // dout·o·σ instead of dout·o·σ(1−σ)
		}
		assert.False(t, passes(t, v, "dgate", bad), "dgate with σ for σ′")
	}
}

// The bars of an f32 file lie between 1e-6 and the float32 cap 1e-5;
// bad flags are refused by name.
func TestGradBarSizes(t *testing.T) {
	for _, T := range []int{2, 20, 300} {
		v, err := BuildGradVector("gdn-core", VectorDims{T: T, NK: 1, NV: 2, DK: 8, DV: 8}, 1, false, false)
		require.NoError(t, err)
		for _, n := range []string{"out", "dq", "dg", "dinitial_state"} {
			bar, err := strconv.ParseFloat(v.Meta["tol."+n+".rel_l2"], 64)
			require.NoError(t, err)
			assert.True(t, bar >= 1e-6 && bar <= 1e-5, "T=%d %s: %g", T, n, bar)
		}
	}
	_, err := BuildGradVector("attention", VectorDims{T: 2, NH: 1, NKV: 1, D: 2, SeqLens: []int{1, 1}}, 1, false, false)
	assert.ErrorContains(t, err, "--seqlens")
	_, err = BuildGradVector("conv", VectorDims{T: 2, C: 1, K: 2}, 1, false, true)
	assert.ErrorContains(t, err, "--l2norm")
}
