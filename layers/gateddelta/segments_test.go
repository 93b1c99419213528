package gateddelta

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// randomLayer is a layer of d with uniform(−½, ½) weights.
func randomLayer(d LayerDims, r *rand.Rand) *Layer {
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32() - 0.5
		}
		return v
	}
	c, hv := d.ConvDim(), d.NV*d.DV
	mat := func(rows, cols int) *tensor.Matrix {
		return &tensor.Matrix{Rows: rows, Cols: cols, F32: vals(rows * cols)}
	}
	return &Layer{Dims: d, W: LayerWeights{
		InProjQKV: mat(c, d.Hidden), InProjZ: mat(hv, d.Hidden), InProjB: mat(d.NV, d.Hidden), InProjA: mat(d.NV, d.Hidden),
		OutProj: mat(d.Hidden, hv), ConvW: vals(c * d.ConvK), ALog: vals(d.NV), DtBias: vals(d.NV), NormW: vals(d.DV),
	}}
}

// forwardPacked is Forward over packed samples through the segment
// entries.
func (l *Layer) forwardPacked(out, x []float32, t int, segs []int, st *State, ops Ops) error {
	w := l.NewWork(t, false)
	defer w.Release()
	for _, f := range []func() error{
		func() error { return l.InProj(w, x, ops, nil) },
		func() error { return l.ConvSegments(w, st, ops, segs, nil) },
		func() error { return l.Prep(w, nil) },
		func() error { return l.CoreSegments(w, st, ops, segs, nil) },
		func() error { return l.GatedNorm(w, nil) },
		func() error { return l.OutProj(out, w, ops) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Packed samples give each sample's own output bit for bit, on the naive
// and chunked kernels, with samples of one token and samples across the
// chunk edge (64), and the state left is the last sample's.
func TestSegmentsEqualSamplesAlone(t *testing.T) {
	d := LayerDims{Hidden: 16, NK: 2, NV: 4, DK: 8, DV: 6, ConvK: 4, Eps: 1e-6}
	r := rand.New(rand.NewPCG(5, 6))
	l := randomLayer(d, r)
	lens := []int{3, 1, 70, 1, 130, 2}
	total := 0
	var segs []int
	for _, n := range lens {
		segs = append(segs, total)
		total += n
	}
	x := make([]float32, total*d.Hidden)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	for _, ops := range []Ops{
		{MatMul: linalg.Naive{}, Conv: conv1d.Naive{}, Core: Naive{}},
		{MatMul: linalg.Naive{}, Conv: conv1d.Chunked{}, Core: Chunked{}},
	} {
		want := make([]float32, total*d.Hidden)
		var last *State
		for i, s := range segs {
			e := segEnd(segs, i, total)
			last = NewState(d)
			require.NoError(t, l.Forward(want[s*d.Hidden:e*d.Hidden], x[s*d.Hidden:e*d.Hidden], e-s, last, ops, nil))
		}
		got := make([]float32, total*d.Hidden)
		st := NewState(d)
		for i := range st.S { // a dirty state: every sample must start from zero
			st.S[i] = 1
		}
		for i := range st.Conv {
			st.Conv[i] = 1
		}
		require.NoError(t, l.forwardPacked(got, x, total, segs, st, ops))
		assert.True(t, slices.Equal(want, got), "%T: packed output differs from the samples alone", ops.Core)
		assert.True(t, slices.Equal(last.S, st.S) && slices.Equal(last.Conv, st.Conv), "%T: the state left is not the last sample's", ops.Core)
	}
}

// Bad segments are refused before any work, naming the segment.
func TestCheckSegments(t *testing.T) {
	for _, c := range []struct {
		segs []int
		want string
	}{
		{nil, "no segments"},
		{[]int{1, 3}, "segment 0 starts at row 1"},
		{[]int{0, 3, 3}, "segment 2 starts at row 3, not after"},
		{[]int{0, 9}, "segment 1 starts at row 9, outside the 9"},
	} {
		err := CheckSegments(c.segs, 9)
		require.Error(t, err, "%v", c.segs)
		assert.Contains(t, err.Error(), c.want)
	}
	assert.NoError(t, CheckSegments([]int{0, 1, 8}, 9))
}
