package moe

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
)

func randMatrix(r *rand.Rand, rows, cols int, bf16 bool) *tensor.Matrix {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(r.NormFloat64() / math.Sqrt(float64(cols)))
	}
	if bf16 {
		b := make([]uint16, len(v))
		for i, x := range v {
			b[i] = tensor.Float32ToBF16(x)
		}
		return &tensor.Matrix{Rows: rows, Cols: cols, BF16: b}
	}
	return &tensor.Matrix{Rows: rows, Cols: cols, F32: v}
}

// randLayer builds a block whose router is scaled up so that the top-k
// choice is decisive (no near-ties between float32 and float64 routing).
func randLayer(seed uint64, d Dims, bf16 bool) *Layer {
	r := rand.New(rand.NewPCG(seed, 7))
	l := &Layer{Dims: d}
	l.W.Router = randMatrix(r, d.Experts, d.Hidden, false)
	for i := range l.W.Router.F32 {
		l.W.Router.F32[i] *= 4
	}
	for range d.Experts {
		l.W.Gate = append(l.W.Gate, randMatrix(r, d.Inter, d.Hidden, bf16))
		l.W.Up = append(l.W.Up, randMatrix(r, d.Inter, d.Hidden, bf16))
		l.W.Down = append(l.W.Down, randMatrix(r, d.Hidden, d.Inter, bf16))
	}
	l.W.SharedGate = randMatrix(r, d.SharedInter, d.Hidden, bf16)
	l.W.SharedUp = randMatrix(r, d.SharedInter, d.Hidden, bf16)
	l.W.SharedDown = randMatrix(r, d.Hidden, d.SharedInter, bf16)
	l.W.SharedProb = randMatrix(r, 1, d.Hidden, false)
	return l
}

func randX(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 11))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// dot64 is Σ x[j]·W[i, j] in float64.
func dot64(w *tensor.Matrix, i int, x []float64) float64 {
	var s float64
	for j, v := range x {
		s += float64(w.At(i, j)) * v
	}
	return s
}

func swiGLU64(x []float64, gate, up, down *tensor.Matrix) []float64 {
	h := make([]float64, gate.Rows)
	for i := range h {
		g := dot64(gate, i, x)
		h[i] = g / (1 + math.Exp(-g)) * dot64(up, i, x)
	}
	y := make([]float64, down.Rows)
	for i := range y {
		y[i] = dot64(down, i, h)
	}
	return y
}

// forward64 is the block in float64, written from transformers'
// Qwen3_5MoeSparseMoeBlock: softmax, topk (stable: lower index on ties),
// optional renormalisation, routed experts, sigmoid-gated shared expert.
func forward64(l *Layer, x []float32, t int) ([]float64, [][]int) {
	d := l.Dims
	h := d.Hidden
	out := make([]float64, t*h)
	chosen := make([][]int, t)
	for tok := range t {
		xt := reference.Widen(x[tok*h : (tok+1)*h])
		p := make([]float64, d.Experts)
		m := math.Inf(-1)
		for e := range p {
			p[e] = dot64(l.W.Router, e, xt)
			m = math.Max(m, p[e])
		}
		var s float64
		for e := range p {
			p[e] = math.Exp(p[e] - m)
			s += p[e]
		}
		idx := make([]int, d.Experts)
		for e := range idx {
			p[e] /= s
			idx[e] = e
		}
		sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
		idx = idx[:d.TopK]
		chosen[tok] = idx
		var sum float64
		for _, e := range idx {
			sum += p[e]
		}
		ot := out[tok*h : (tok+1)*h]
		for _, e := range idx {
			w := p[e]
			if d.NormTopK {
				w /= sum
			}
			for c, v := range swiGLU64(xt, l.W.Gate[e], l.W.Up[e], l.W.Down[e]) {
				ot[c] += w * v
			}
		}
		g := 1 / (1 + math.Exp(-dot64(l.W.SharedProb, 0, xt)))
		for c, v := range swiGLU64(xt, l.W.SharedGate, l.W.SharedUp, l.W.SharedDown) {
			ot[c] += g * v
		}
	}
	return out, chosen
}

var testDims = []Dims{
	{Hidden: 48, Experts: 8, TopK: 2, Inter: 24, SharedInter: 40, NormTopK: true},
	{Hidden: 64, Experts: 16, TopK: 4, Inter: 32, SharedInter: 32, NormTopK: false},
	{Hidden: 32, Experts: 5, TopK: 5, Inter: 16, SharedInter: 8, NormTopK: true}, // every expert chosen
}

// Naive and grouped agree with the float64 block at the golden bar, for
// one token (decode), a few, and more tokens than experts, f32 and bf16
// weights, through both matrix products.
func TestMoEMatchesFloat64(t *testing.T) {
	for di, d := range testDims {
		for _, bf16 := range []bool{false, true} {
			l := randLayer(uint64(di), d, bf16)
			require.NoError(t, l.Check())
			for _, tt := range []int{1, 3, 37} {
				x := randX(uint64(tt), tt*d.Hidden)
				want, chosen := forward64(l, x, tt)
				for _, k := range []struct {
					name string
					kern Kernel
					mm   linalg.MatMuler
				}{{"naive", Naive{}, linalg.Naive{}}, {"grouped", Grouped{}, linalg.Blocked{}}, {"grouped-naivemm", Grouped{}, linalg.Naive{}}} {
					got := make([]float32, tt*d.Hidden)
					var experts []float32
					rec := func(stage string, x *tensor.Tensor) {
						if stage == "router_experts" {
							experts = slices.Clone(x.Data)
						}
					}
					require.NoError(t, l.Forward(got, x, tt, k.kern, k.mm, rec))
					for tok := range tt {
						for j, e := range chosen[tok] {
							require.Equal(t, float32(e), experts[tok*d.TopK+j], "%s token %d rank %d", k.name, tok, j)
						}
					}
					rel := reference.RelL2(got, want)
					assert.Less(t, rel, tensor.GoldenRelL2, "dims %d bf16=%v T=%d %s: rel L2 %.2e", di, bf16, tt, k.name, rel)
				}
			}
		}
	}
}

// The grouped form must not depend on how many tokens share an expert:
// running tokens one at a time gives the same rows as all at once, to
// float32 rounding (the vector SiLU treats a slice's tail lanes apart, so
// the bits may differ with the group's length at some kernel levels).
func TestGroupedBatchInvariant(t *testing.T) {
	d := testDims[0]
	l := randLayer(3, d, false)
	tt := 29
	x := randX(5, tt*d.Hidden)
	all := make([]float32, tt*d.Hidden)
	require.NoError(t, l.Forward(all, x, tt, Grouped{}, linalg.Naive{}, nil))
	for tok := range tt {
		one := make([]float32, d.Hidden)
		require.NoError(t, l.Forward(one, x[tok*d.Hidden:(tok+1)*d.Hidden], 1, Grouped{}, linalg.Naive{}, nil))
		assert.LessOrEqual(t, tensor.RelL2(one, all[tok*d.Hidden:(tok+1)*d.Hidden]), 1e-6, "token %d", tok)
	}
}

func TestRouteTopKTiesAndNorm(t *testing.T) {
	d := Dims{Experts: 6, TopK: 3, NormTopK: false}
	// Experts 1, 3 and 4 tie at the top; 0 and 5 tie below them.
	logits := []float32{1, 2, 0, 2, 2, 1}
	r := d.Route(logits, 1)
	// Which tie wins is torch.topk's (libstdc++'s nth_element, see topk.go
	// and TestTorchTopKMatchesLibstdcxx); the set of winners is fixed.
	assert.ElementsMatch(t, []int32{1, 3, 4}, r.Experts, "the three tied top experts")
	p := math.Exp(2) / (3*math.Exp(2) + 2*math.Exp(1) + 1)
	for _, w := range r.Weights {
		assert.InDelta(t, p, w, 1e-7, "without norm_topk_prob the weights are the probabilities")
	}
	d.TopK = 4
	r = d.Route(logits, 1)
	assert.ElementsMatch(t, []int32{1, 3, 4}, r.Experts[:3], "the top three, in torch's order")
	assert.Contains(t, []int32{0, 5}, r.Experts[3], "one of the two tied at the boundary")
	d.NormTopK = true
	r = d.Route(logits, 1)
	var s float32
	for _, w := range r.Weights {
		s += w
	}
	assert.InDelta(t, 1, s, 1e-6)
	assert.InDelta(t, math.Exp(2)/(3*math.Exp(2)+math.Exp(1)), r.Weights[0], 1e-6)

	// A row of NaN still yields valid indices (torch ranks NaN first).
	nan := float32(math.NaN())
	d = Dims{Experts: 3, TopK: 2}
	r = d.Route([]float32{nan, nan, nan}, 1)
	for _, e := range r.Experts {
		assert.True(t, e >= 0 && e < 3)
	}
}

func TestCheckNamesTheBadTensor(t *testing.T) {
	l := randLayer(1, testDims[0], false)
	l.W.Down[3] = randMatrix(rand.New(rand.NewPCG(1, 1)), 5, 5, false)
	err := l.Check()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "expert 3 down")
	l = randLayer(1, testDims[0], false)
	l.Dims.TopK = 9
	assert.ErrorContains(t, l.Check(), "top-k 9 of 8")
	x := make([]float32, 10)
	assert.ErrorContains(t, randLayer(1, testDims[0], false).Forward(x, x, 1, Naive{}, linalg.Naive{}, nil), "want T·H")
}
