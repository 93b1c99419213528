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

// Every stage Forward records is in Stages, with its shape, in the same
// order, and Stages lists nothing Forward does not record.
func TestStagesAreWhatForwardRecords(t *testing.T) {
	d := LayerDims{Hidden: 16, NH: 4, NKV: 2, D: 8, RotaryDim: 4, Theta: 1e4, Eps: 1e-6}
	r := rand.New(rand.NewPCG(5, 6))
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
	var got []tensor.Stage
	rec := func(name string, x *tensor.Tensor) {
		got = append(got, tensor.Stage{Name: name, Shape: slices.Clone(x.Shape)})
	}
	const tokens = 3
	out := make([]float32, tokens*d.Hidden)
	require.NoError(t, l.Forward(out, vals(tokens*d.Hidden), tokens, &Cache{}, Ops{MatMul: linalg.Naive{}, Core: Naive{}}, rec))
	want := d.Stages(tokens)
	require.Equal(t, len(want), len(got), "stages recorded %v", got)
	for i, s := range want {
		assert.Equal(t, s.Name, got[i].Name, "stage %d", i)
		assert.Equal(t, s.Shape, got[i].Shape, s.Name)
	}
}

// The paths follow the layer: the softmax sum grows with the tokens, and
// o_proj's fan-in and product end the output's path.
func TestStagePaths(t *testing.T) {
	d := LayerDims{Hidden: 64, NH: 4, NKV: 1, D: 16}
	paths := map[string]tensor.StagePath{}
	for _, s := range d.Stages(10) {
		paths[s.Name] = s.Path
	}
	assert.Equal(t, tensor.StagePath{Reduction: 64, Amp: 1, Products: 1}, paths["v_proj"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 16, Amp: 1, Products: 1}, paths["k_rope"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 16 + 16 + 10, Amp: 1, Products: 1}, paths["attn_core"])
	assert.Equal(t, paths["attn_core"], paths["gated"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 16 + 16 + 10 + 4*16, Amp: 1, Products: 2}, d.OutputPath(10))
}
