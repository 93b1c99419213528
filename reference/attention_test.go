package reference

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/attention"
)

// The first token sees only itself: softmax over one score is 1, so the
// output is its value, whatever q and k are.
func TestAttentionFirstTokenIsItsValue(t *testing.T) {
	d := attention.Dims{T: 1, S: 1, NH: 2, NKV: 1, D: 3}
	out := make([]float64, 6)
	v := []float64{1, -2, 3}
	require.NoError(t, Attention(out, []float64{5, 6, 7, -1, 0, 2}, []float64{0.3, 0.1, 9}, v, d, 0.5))
	assert.Equal(t, []float64{1, -2, 3, 1, -2, 3}, out)
}

// With all keys equal the scores tie, so each query averages the values it
// may see: query t (at position S−T+t) averages v[0..S−T+t]. This pins both
// causality and the offset of new tokens behind a cache.
func TestAttentionEqualKeysAverage(t *testing.T) {
	d := attention.Dims{T: 2, S: 4, NH: 1, NKV: 1, D: 1}
	out := make([]float64, 2)
	v := []float64{1, 2, 3, 10}
	require.NoError(t, Attention(out, []float64{0.7, -0.4}, []float64{1, 1, 1, 1}, v, d, 1))
	assert.InDeltaSlice(t, []float64{(1 + 2 + 3) / 3.0, (1 + 2 + 3 + 10) / 4.0}, out, 1e-15)
}

// Query head h reads KV head h/(NH/NKV): with 4 query heads on 2 KV heads,
// heads 0,1 use KV head 0 and heads 2,3 use KV head 1.
func TestAttentionGQAMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	d := attention.Dims{T: 3, S: 3, NH: 4, NKV: 2, D: 2}
	q, k, v := Widen(randn(r, 3*4*2, 1)), Widen(randn(r, 3*2*2, 1)), Widen(randn(r, 3*2*2, 1))
	out := make([]float64, len(q))
	require.NoError(t, Attention(out, q, k, v, d, 0.7))
	for h := 0; h < 4; h++ {
		// The same query head alone against its KV head only.
		pick := func(x []float64, n, head int) []float64 {
			var o []float64
			for t := 0; t < 3; t++ {
				o = append(o, x[(t*n+head)*2:(t*n+head+1)*2]...)
			}
			return o
		}
		one := make([]float64, 6)
		require.NoError(t, Attention(one, pick(q, 4, h), pick(k, 2, h/2), pick(v, 2, h/2),
			attention.Dims{T: 3, S: 3, NH: 1, NKV: 1, D: 2}, 0.7))
		assert.Equal(t, one, pick(out, 4, h), "head %d", h)
	}
}

func TestAttentionErrors(t *testing.T) {
	assert.ErrorContains(t, Attention(nil, nil, nil, nil, attention.Dims{T: 2, S: 1, NH: 1, NKV: 1, D: 1}, 1), "bad attention dims")
	assert.ErrorContains(t, Attention(nil, nil, nil, nil, attention.Dims{T: 1, S: 1, NH: 3, NKV: 2, D: 1}, 1), "not a multiple")
	err := Attention(make([]float64, 2), make([]float64, 2), make([]float64, 1), make([]float64, 2),
		attention.Dims{T: 1, S: 2, NH: 2, NKV: 1, D: 1}, 1)
	assert.ErrorContains(t, err, "k has 1 values, want 2")
}

// The float32 naive kernel must match the float64 reference: each output
// is a softmax-weighted mean of O(1) values whose weights come from D-term
// dot products; float32 rounding (≈6e-8 per op, sums of a few hundred
// terms) gives ~1e-7 relative L2, and 2e-6 still fails any wrong mask,
// offset, scale or head mapping by orders of magnitude.
func TestAttentionMatchesNaive(t *testing.T) {
	for _, d := range []attention.Dims{
		{T: 70, S: 70, NH: 4, NKV: 2, D: 32},
		{T: 5, S: 40, NH: 6, NKV: 1, D: 16}, // continuation behind a cache
		{T: 1, S: 9, NH: 2, NKV: 2, D: 8},   // decode
	} {
		r := rand.New(rand.NewPCG(7, uint64(d.S)))
		q, k, v := randn(r, d.T*d.NH*d.D, 1), randn(r, d.S*d.NKV*d.D, 1), randn(r, d.S*d.NKV*d.D, 1)
		scale := float32(1 / math.Sqrt(float64(d.D)))
		out32 := make([]float32, len(q))
		require.NoError(t, attention.Naive{}.Forward(out32, q, k, v, d, scale))
		out64 := make([]float64, len(q))
		require.NoError(t, Attention(out64, Widen(q), Widen(k), Widen(v), d, float64(scale)))
		e := RelL2(out32, out64)
		t.Logf("%+v: out rel L2 %.2e", d, e)
		assert.Less(t, e, 2e-6)
	}
}
