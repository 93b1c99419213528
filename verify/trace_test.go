package verify

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/weights"
)

// A trace holds exactly the model's stage list, in order and with its
// shapes; written out, it keeps its stages and records the ids.
func TestTraceIsTheModelsStageList(t *testing.T) {
	m := openModel(t, traceGolden)
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	ids := []int{5, 17, 42, 7}
	stages, err := Trace(m, be, ids)
	require.NoError(t, err)
	want := m.Stages(len(ids))
	require.Len(t, stages, len(want))
	for i, s := range want {
		assert.Equal(t, s.Name, stages[i].Name)
		assert.Equal(t, s.Shape, stages[i].Shape, s.Name)
	}
	path := filepath.Join(t.TempDir(), "trace.safetensors")
	require.NoError(t, WriteTrace(path, stages, m, be.Name, traceGolden, ids, weights.WriteOptions{}))
	meta, err := ReadMetadata(path)
	require.NoError(t, err)
	assert.Equal(t, "5,17,42,7", meta["ids"])
	assert.Equal(t, "2 Gated DeltaNet, 2 attention", meta["layers"])
	assert.Equal(t, "qwenref trace", meta["producer"])
	require.NoError(t, CheckTraceIDs(path, ids))
	assert.ErrorContains(t, CheckTraceIDs(path, ids[:3]), "traced on ids 5,17,42,7, not 5,17,42")
	assert.NoError(t, CheckTraceIDs(filepath.Join(traceGolden, "expected.safetensors"), ids), "goldens carry no ids")
	st := openRef(t, path)
	assert.Len(t, st.Names(), len(stages))
}

// The chained comparison: an absent stage agrees, a batched reference is
// compared on its row 0, a shape that does not divide is a problem.
func TestCompareChained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ref.safetensors")
	require.NoError(t, weights.WriteFile(path, []weights.NamedTensor{
		{Name: "a", DType: "F32", Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}},
		{Name: "b", DType: "F32", Shape: []int{3}, Data: []float32{1, 2, 3}},
	}, nil))
	ref := openRef(t, path)
	c := CompareChained(ref, TracedStage{Name: "none", Data: []float32{1}}, 1e-5)
	assert.Equal(t, ChainedCheck{OK: true}, c)
	c = CompareChained(ref, TracedStage{Name: "a", Shape: []int{1, 2}, Data: []float32{1, 2}}, 1e-5)
	assert.Equal(t, ChainedCheck{InReference: true, OK: true}, c, "row 0 of a batch")
	c = CompareChained(ref, TracedStage{Name: "a", Shape: []int{1, 2}, Data: []float32{1, 2.1}}, 1e-5)
	assert.True(t, c.InReference)
	assert.False(t, c.OK)
	assert.InDelta(t, 0.1/2.2360679, c.RelL2, 1e-6)
	c = CompareChained(ref, TracedStage{Name: "b", Shape: []int{2}, Data: []float32{1, 2}}, 1e-5)
	assert.Equal(t, "shape [3] there, [2] here", c.Problem)
	assert.False(t, c.OK)
}
