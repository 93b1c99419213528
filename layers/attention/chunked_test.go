package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// Both cores must satisfy the frame's interface.
var (
	_ Kernel = Naive{}
	_ Kernel = Chunked{}
)

// coreTol bounds ‖Chunked − Naive‖/‖Naive‖ on random inputs. Both work in
// float32 and differ only in rounding: the D-term dot products are summed
// in another order (≈ √D·2^-24 ≈ 1e-6 relative to |q||k| at D = 256), the
// exponentials are a float64 call against a float32 polynomial (a few
// ulps), and the S-term sums are split into blocks and rescaled. With
// scores of order 1 (unit-variance q, k, scale D^-1/2) that is ~1e-6 on the
// output, so 1e-5 leaves 10×; a wrong mask, offset or head mapping errs by
// O(1).
const coreTol = 1e-5

type attnProblem struct {
	d       Dims
	q, k, v []float32
	scale   float32
}

func newAttnProblem(rng *rand.Rand, d Dims) attnProblem {
	return attnProblem{d: d,
		q: coreRandn(rng, d.T*d.NH*d.D), k: coreRandn(rng, d.S*d.NKV*d.D), v: coreRandn(rng, d.S*d.NKV*d.D),
		scale: float32(1 / math.Sqrt(float64(d.D)))}
}

func coreRandn(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func (p attnProblem) run(t *testing.T, kern Kernel) []float32 {
	t.Helper()
	out := make([]float32, p.d.T*p.d.NH*p.d.D)
	for i := range out {
		out[i] = float32(math.NaN()) // every output must be written
	}
	require.NoError(t, kern.Forward(out, p.q, p.k, p.v, p.d, p.scale))
	return out
}

func TestChunkedMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type heads struct{ nh, nkv int }
	blocks := []Chunked{
		{},                       // defaults: 16 tokens × 6 heads = 96 rows per tile
		{BlockQ: 7, BlockK: 24},  // divide neither T nor S
		{BlockQ: 1, BlockK: 1},   // one row per tile, one key per block
		{BlockQ: 64, BlockK: 64}, // divide T = 64 exactly
	}
	for _, hd := range []heads{{2, 2}, {12, 2}} { // GQA ratios 1 and 6
		for _, dim := range []int{256, 16, 13} { // 13: PV rows not a multiple of 4, nor D of 16
			for _, tt := range []int{1, 7, 64, 65, 300} {
				for _, past := range []int{0, 37} { // S = T, and a cached prefix
					d := Dims{T: tt, S: tt + past, NH: hd.nh, NKV: hd.nkv, D: dim}
					if testing.Short() && tt*d.NH*dim > 300*12*64 {
						continue
					}
					p := newAttnProblem(rng, d)
					want := p.run(t, Naive{})
					for _, c := range blocks {
						t.Run(fmt.Sprintf("%+v/%+v", d, c), func(t *testing.T) {
							got := p.run(t, c)
							assert.LessOrEqual(t, tensor.RelL2(got, want), coreTol)
						})
					}
				}
			}
		}
	}
}

// TestLargeScores drives the online softmax with scores of magnitude ~10³,
// where e^s overflows float32 unless the running maximum is subtracted,
// and with maxima that grow from block to block (every block rescales) or
// shrink. Inputs are small integers and the scale is 1, so every score is
// an exact integer in both kernels: they then differ only in exp and sum
// rounding, and coreTol still applies.
func TestLargeScores(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const tt, past, nh, nkv, dim = 40, 60, 6, 1, 16
	d := Dims{T: tt, S: tt + past, NH: nh, NKV: nkv, D: dim}
	ints := func(n, lim int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.IntN(2*lim+1) - lim)
		}
		return s
	}
	random := attnProblem{d: d, q: ints(tt*nh*dim, 8), k: ints(d.S*nkv*dim, 8), v: coreRandn(rng, d.S*nkv*dim), scale: 1}

	// Scores s_j = ±20·j through q = e0 and k_j = ±20·j·e0: up to 2·10³.
	ramp := func(sign float32) attnProblem {
		p := attnProblem{d: d, q: make([]float32, tt*nh*dim), k: make([]float32, d.S*nkv*dim), v: coreRandn(rng, d.S*nkv*dim), scale: 1}
		for i := 0; i < len(p.q); i += dim {
			p.q[i] = 1
		}
		for j := range d.S {
			p.k[j*dim] = sign * 20 * float32(j)
		}
		return p
	}
	for name, p := range map[string]attnProblem{"random": random, "rising": ramp(1), "falling": ramp(-1)} {
		want := p.run(t, Naive{})
		for _, c := range []Chunked{{}, {BlockQ: 3, BlockK: 8}} {
			got := p.run(t, c)
			assert.LessOrEqual(t, tensor.RelL2(got, want), coreTol, "%s %+v", name, c)
			for _, x := range got {
				require.False(t, math.IsNaN(float64(x)) || math.IsInf(float64(x), 0), "%s: non-finite output", name)
			}
		}
	}
	// Rising scores 20 apart: each query's weight sits on its last visible
	// key to within e^-20, so the output is that key's value row.
	p := ramp(1)
	got := p.run(t, Chunked{BlockK: 8})
	for tq := range tt {
		last := past + tq
		for h := range nh {
			o := got[(tq*nh+h)*dim : (tq*nh+h+1)*dim]
			assert.InDeltaSlice(t, p.v[last*dim:(last+1)*dim], o, 1e-6, "t=%d h=%d", tq, h)
		}
	}
}

// TestNaiveByHand pins the reference to the formula on a case small enough
// to do by hand: one head, D = 1, T = 2 after one cached token.
func TestNaiveCoreByHand(t *testing.T) {
	d := Dims{T: 2, S: 3, NH: 1, NKV: 1, D: 1}
	q := []float32{1, 2}
	k := []float32{0, 1, 2}
	v := []float32{10, 20, 40}
	out := make([]float32, 2)
	require.NoError(t, Naive{}.Forward(out, q, k, v, d, 0.5))
	// Query 0 sits at position 1: scores 0.5·1·{0, 1} over keys 0..1.
	e := math.Exp(0.5)
	want0 := (10 + 20*e) / (1 + e)
	// Query 1 at position 2: scores 0.5·2·{0, 1, 2} = {0, 1, 2}.
	e1, e2 := math.Exp(1), math.Exp(2)
	want1 := (10 + 20*e1 + 40*e2) / (1 + e1 + e2)
	assert.InDelta(t, want0, out[0], 1e-5)
	assert.InDelta(t, want1, out[1], 1e-5)
}

// TestGQAMapping checks that query head h reads KV head h/(NH/NKV): with
// values constant per KV head, each output is that constant.
func TestGQAMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := Dims{T: 5, S: 9, NH: 6, NKV: 3, D: 4}
	p := newAttnProblem(rng, d)
	for j := range d.S {
		for g := range d.NKV {
			for i := range d.D {
				p.v[(j*d.NKV+g)*d.D+i] = float32(100 * (g + 1))
			}
		}
	}
	for _, kern := range []Kernel{Naive{}, Chunked{}} {
		out := p.run(t, kern)
		for tq := range d.T {
			for h := range d.NH {
				for i := range d.D {
					assert.InDelta(t, 100*(h/2+1), out[(tq*d.NH+h)*d.D+i], 1e-3, "%T t=%d h=%d", kern, tq, h)
				}
			}
		}
	}
}

func TestCoreErrors(t *testing.T) {
	mk := func(d Dims) (out, q, k, v []float32) {
		return make([]float32, d.T*d.NH*d.D), make([]float32, d.T*d.NH*d.D),
			make([]float32, d.S*d.NKV*d.D), make([]float32, d.S*d.NKV*d.D)
	}
	good := Dims{T: 2, S: 3, NH: 4, NKV: 2, D: 8}
	for _, kern := range []Kernel{Naive{}, Chunked{}} {
		out, q, k, v := mk(good)
		assert.NoError(t, kern.Forward(out, q, k, v, good, 1))
		for _, bad := range []Dims{
			{T: 2, S: 1, NH: 4, NKV: 2, D: 8}, // S < T
			{T: 2, S: 3, NH: 4, NKV: 3, D: 8}, // NH not a multiple of NKV
			{T: 2, S: 3, NH: 4, NKV: 0, D: 8},
			{T: 2, S: 3, NH: 4, NKV: 2, D: 0},
			{T: -1, S: 3, NH: 4, NKV: 2, D: 8},
		} {
			assert.Error(t, kern.Forward(out, q, k, v, bad, 1), "%T %+v", kern, bad)
		}
		assert.Error(t, kern.Forward(out[:1], q, k, v, good, 1), "short out")
		assert.Error(t, kern.Forward(out, q[:1], k, v, good, 1), "short q")
		assert.Error(t, kern.Forward(out, q, k[:1], v, good, 1), "short k")
		assert.Error(t, kern.Forward(out, q, k, v[:1], good, 1), "short v")
		if _, ok := kern.(Chunked); ok {
			assert.Error(t, Chunked{BlockQ: -1}.Forward(out, q, k, v, good, 1), "negative BlockQ")
			assert.Error(t, Chunked{BlockK: -4}.Forward(out, q, k, v, good, 1), "negative BlockK")
		}
		// T = 0 (nothing new) is valid and does nothing.
		zero := Dims{T: 0, S: 3, NH: 4, NKV: 2, D: 8}
		assert.NoError(t, kern.Forward(nil, nil, k, v, zero, 1))
	}
}

// Example: one head of dim 2 and two tokens; the second token attends to
// both keys, the first only to itself.
func ExampleChunked() {
	d := Dims{T: 2, S: 2, NH: 1, NKV: 1, D: 2}
	q := []float32{1, 0, 1, 0}
	k := []float32{1, 0, 0, 0} // score 1 for key 0, 0 for key 1
	v := []float32{1, 2, 3, 4}
	out := make([]float32, 4)
	_ = Chunked{}.Forward(out, q, k, v, d, 1)
	fmt.Printf("%.4f\n", out)
	// Output: [1.0000 2.0000 1.5379 2.5379]
}
