package attention

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// Packed samples give each sample's own output bit for bit on the naive
// and chunked cores (positions restart, each sample attends to itself
// alone), with one-token samples and samples across the chunked core's
// tiles, and the cache left is the last sample's.
func TestSegmentsEqualSamplesAlone(t *testing.T) {
	d := LayerDims{Hidden: 16, NH: 4, NKV: 2, D: 8, RotaryDim: 4, Theta: 1e4, Eps: 1e-6}
	r := rand.New(rand.NewPCG(7, 8))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32() - 0.5
		}
		return v
	}
	mat := func(rows, cols int) *tensor.Matrix {
		return &tensor.Matrix{Rows: rows, Cols: cols, F32: vals(rows * cols)}
	}
	l := &Layer{Dims: d, W: LayerWeights{
		QProj: mat(2*d.NH*d.D, d.Hidden), KProj: mat(d.NKV*d.D, d.Hidden), VProj: mat(d.NKV*d.D, d.Hidden),
		OProj: mat(d.Hidden, d.NH*d.D), QNorm: vals(d.D), KNorm: vals(d.D),
	}}
	lens := []int{2, 1, 70, 1, 140}
	total := 0
	var segs []int
	for _, n := range lens {
		segs = append(segs, total)
		total += n
	}
	x := vals(total * d.Hidden)
	for _, core := range []Kernel{Naive{}, Chunked{}} {
		ops := Ops{MatMul: linalg.Naive{}, Core: core}
		want := make([]float32, total*d.Hidden)
		var last *Cache
		for i, s := range segs {
			e := segEnd(segs, i, total)
			last = &Cache{}
			require.NoError(t, l.Forward(want[s*d.Hidden:e*d.Hidden], x[s*d.Hidden:e*d.Hidden], e-s, last, ops, nil))
		}
		got := make([]float32, total*d.Hidden)
		cache := &Cache{K: vals(3 * d.NKV * d.D), V: vals(3 * d.NKV * d.D), Len: 3} // a used cache: every sample must start empty
		w := l.NewWork(total, false)
		require.NoError(t, l.QKV(w, x, ops, nil))
		require.NoError(t, l.PrepSegments(w, segs, nil))
		require.NoError(t, l.CoreSegments(w, cache, ops, segs, nil))
		require.NoError(t, l.OutProj(got, w, ops))
		w.Release()
		assert.True(t, slices.Equal(want, got), "%T: packed output differs from the samples alone", core)
		assert.Equal(t, last.Len, cache.Len, "%T: cache length", core)
		assert.True(t, slices.Equal(last.K, cache.K) && slices.Equal(last.V, cache.V), "%T: the cache left is not the last sample's", core)
	}
	w := l.NewWork(total, false)
	defer w.Release()
	require.NoError(t, l.QKV(w, x, Ops{MatMul: linalg.Naive{}}, nil))
	assert.ErrorContains(t, l.PrepSegments(w, []int{0, 5, 5}, nil), "segment 2 starts at row 5")
	assert.ErrorContains(t, l.CoreSegments(w, &Cache{}, Ops{Core: Naive{}}, []int{1}, nil), "beginning at 0")
}
