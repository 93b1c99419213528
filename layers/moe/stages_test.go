package moe

import (
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
	d := Dims{Hidden: 16, Experts: 6, TopK: 2, Inter: 8, SharedInter: 12, NormTopK: true}
	l := randLayer(9, d, false)
	var got []tensor.Stage
	rec := func(name string, x *tensor.Tensor) {
		got = append(got, tensor.Stage{Name: name, Shape: slices.Clone(x.Shape)})
	}
	const tokens = 3
	out := make([]float32, tokens*d.Hidden)
	require.NoError(t, l.Forward(out, randX(2, tokens*d.Hidden), tokens, Naive{}, linalg.Naive{}, rec))
	want := d.Stages(tokens)
	require.Equal(t, len(want), len(got), "stages recorded %v", got)
	for i, s := range want {
		assert.Equal(t, s.Name, got[i].Name, "stage %d", i)
		assert.Equal(t, s.Shape, got[i].Shape, s.Name)
	}
}

// The paths follow the block: the routing adds the softmax over the
// experts to the router's, and the output takes the longer branch.
func TestStagePaths(t *testing.T) {
	d := Dims{Hidden: 64, Experts: 8, TopK: 2, Inter: 32, SharedInter: 48}
	paths := map[string]tensor.StagePath{}
	for _, s := range d.Stages(4) {
		paths[s.Name] = s.Path
	}
	assert.Equal(t, tensor.StagePath{Reduction: 64, Amp: 1, Products: 1}, paths["router_logits"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 8, Amp: 1, Products: 1}, paths["router_weights"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 32 + 2, Amp: 1, Products: 3}, paths["experts_out"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 48, Amp: 1, Products: 2}, paths["shared_out"])
	assert.Equal(t, tensor.StagePath{Reduction: 64 + 48, Amp: 1, Products: 3}, d.OutputPath(), "the shared branch is the longer here")
	d.SharedInter = 8
	assert.Equal(t, paths["experts_out"], d.OutputPath())
}
