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

// recorded runs Forward on a random layer and returns every stage it
// recorded, with its shape, in order.
func recorded(t *testing.T, d LayerDims, tokens int) []tensor.Stage {
	r := rand.New(rand.NewPCG(3, 4))
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
	c, hv := d.ConvDim(), d.NV*d.DV
	l := &Layer{Dims: d, W: LayerWeights{
		InProjQKV: mat(c, d.Hidden), InProjZ: mat(hv, d.Hidden), InProjB: mat(d.NV, d.Hidden), InProjA: mat(d.NV, d.Hidden),
		OutProj: mat(d.Hidden, hv), ConvW: vals(c * d.ConvK), ALog: vals(d.NV), DtBias: vals(d.NV), NormW: vals(d.DV),
	}}
	var got []tensor.Stage
	rec := func(name string, x *tensor.Tensor) {
		got = append(got, tensor.Stage{Name: name, Shape: slices.Clone(x.Shape)})
	}
	out := make([]float32, tokens*d.Hidden)
	ops := Ops{MatMul: linalg.Naive{}, Conv: conv1d.Naive{}, Core: Naive{}}
	require.NoError(t, l.Forward(out, vals(tokens*d.Hidden), tokens, NewState(d), ops, rec))
	return got
}

// Every stage Forward records is in Stages, with its shape, in the same
// order, and Stages lists nothing Forward does not record.
func TestStagesAreWhatForwardRecords(t *testing.T) {
	d := LayerDims{Hidden: 12, NK: 2, NV: 4, DK: 8, DV: 6, ConvK: 4, Eps: 1e-6}
	got := recorded(t, d, 5)
	want := d.Stages(5)
	require.Equal(t, len(want), len(got), "stages recorded %v", got)
	for i, s := range want {
		assert.Equal(t, s.Name, got[i].Name, "stage %d", i)
		assert.Equal(t, s.Shape, got[i].Shape, s.Name)
	}
}

// The paths follow the layer: each later stage's reduction is no shorter,
// the recurrence grows with T, and the gated RMSNorm doubles the error.
func TestStagePaths(t *testing.T) {
	d := LayerDims{Hidden: 64, NK: 1, NV: 2, DK: 16, DV: 16, ConvK: 4}
	paths := map[string]tensor.StagePath{}
	for _, s := range d.Stages(10) {
		assert.Positive(t, s.Path.Amp, s.Name)
		paths[s.Name] = s.Path
	}
	assert.Equal(t, tensor.StagePath{Reduction: 64, Amp: 1, Products: 1}, paths["qkv_proj"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 4 + 16 + 10*16, Amp: 1, Products: 1}, paths["core_out"])
	assert.Equal(t, paths["core_out"], paths["final_state"])
	assert.Equal(t, 2.0, paths["gated_norm_out"].Amp)
	assert.Equal(t, tensor.StagePath{Reduction: paths["gated_norm_out"].Reduction + 2*16, Amp: 2, Products: 3}, d.OutputPath(10))
	assert.Greater(t, d.Stages(100)[10].Path.Reduction, paths["core_out"].Reduction, "core_out's path grows with T")
}
