package verify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/weights"
)

// traceGolden's layer 0 is an attention layer and layer 1 a Gated
// DeltaNet one.
var traceGolden = filepath.Join(goldenRoot, "causal-f16-t130")

// goldenIDs is row 0 of a golden checkpoint's inputs.json.
func goldenIDs(t *testing.T, dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	require.NoError(t, err)
	var in struct{ IDs [][]int }
	require.NoError(t, json.Unmarshal(data, &in))
	require.NotEmpty(t, in.IDs)
	return in.IDs[0]
}

func openModel(t *testing.T, dir string) *model.Model {
	m, err := model.Load(dir)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func openRef(t *testing.T, path string) *weights.Store {
	ref, err := weights.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { ref.Close() })
	return ref
}

// The naive backend agrees with transformers' own stages, teacher-forced,
// at every stage of every layer and in isolation.
func TestTeacherForcedAgreesWithTransformers(t *testing.T) {
	m := openModel(t, traceGolden)
	refPath := filepath.Join(traceGolden, "expected.safetensors")
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	ids := goldenIDs(t, traceGolden)
	rep, err := TeacherForced(m, be, openRef(t, refPath), refPath, ids, false)
	require.NoError(t, err)
	assert.Equal(t, "agree", rep.Verdict, "first failure %+v", rep.First)
	assert.Nil(t, rep.First)
	assert.Equal(t, TraceSchema, rep.Schema)
	assert.Equal(t, "f32", rep.Precision)
	assert.Equal(t, len(ids), rep.Tokens)
	assert.Equal(t, len(rep.Checks), rep.Compared)
	modes := map[string]int{}
	var stages []string
	for _, c := range rep.Checks {
		modes[c.Mode]++
		stages = append(stages, c.Stage)
	}
	assert.Positive(t, modes["forced"])
	assert.Positive(t, modes["isolated"])
	for _, s := range []string{"embeddings", "layers.0.attn_core", "layers.1.core_out", "layers.3.output", "final_norm", "logits"} {
		assert.Contains(t, stages, s)
	}
	w := Worst(rep.Checks)
	assert.LessOrEqual(t, w.RelL2, w.TolRelL2)
	for _, c := range rep.Checks {
		assert.LessOrEqual(t, c.RelL2/c.TolRelL2, w.RelL2/w.TolRelL2, "Worst is the closest to its bar")
	}
}

// A reference with one wrong element fails at exactly that stage, first in
// isolation; one traced on other ids is refused.
func TestTeacherForcedNamesTheWrongStage(t *testing.T) {
	m := openModel(t, traceGolden)
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	ids := []int{1, 2, 3}
	stages, err := Trace(m, be, ids)
	require.NoError(t, err)
	for _, s := range stages {
		if s.Name == "layers.1.conv_out" {
			s.Data[7] += 0.5
		}
	}
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	require.NoError(t, WriteTrace(path, stages, m, be.Name, traceGolden, ids, weights.WriteOptions{}))
	rep, err := TeacherForced(m, be, openRef(t, path), path, ids, false)
	require.NoError(t, err)
	assert.Equal(t, "differ", rep.Verdict)
	require.NotNil(t, rep.First)
	assert.Equal(t, "layers.1.conv_out", rep.First.Stage)
	assert.Equal(t, "isolated", rep.First.Mode)
	assert.Same(t, rep.First, &rep.Checks[slices.IndexFunc(rep.Checks, func(c Check) bool { return !c.OK })])
	assert.Contains(t, rep.First.String(), "DIFFERS")

	_, err = TeacherForced(m, be, openRef(t, path), path, []int{1, 2, 4}, false)
	assert.ErrorContains(t, err, "traced on ids 1,2,3, not 1,2,4")
}

// Under the bf16 error model the bars are bf16's, far looser than the
// float32 ones of the same stages.
func TestTeacherForcedBF16Bars(t *testing.T) {
	m := openModel(t, traceGolden)
	refPath := filepath.Join(traceGolden, "expected.safetensors")
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	ids := goldenIDs(t, traceGolden)
	f32, err := TeacherForced(m, be, openRef(t, refPath), refPath, ids, false)
	require.NoError(t, err)
	bf16, err := TeacherForced(m, be, openRef(t, refPath), refPath, ids, true)
	require.NoError(t, err)
	assert.Equal(t, "bf16", bf16.Precision)
	require.Equal(t, len(f32.Checks), len(bf16.Checks))
	for i := range f32.Checks {
		assert.Greater(t, bf16.Checks[i].TolRelL2, 100*f32.Checks[i].TolRelL2, f32.Checks[i].Stage)
	}
}

// A reference holding nothing of the model compares nothing: the
// verdict says so.
func TestTeacherForcedNothingCompared(t *testing.T) {
	m := openModel(t, traceGolden)
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "other.safetensors")
	require.NoError(t, weights.WriteFile(path, []weights.NamedTensor{{Name: "unrelated", DType: "F32", Shape: []int{2}, Data: []float32{1, 2}}}, nil))
	rep, err := TeacherForced(m, be, openRef(t, path), path, []int{1, 2, 3}, false)
	require.NoError(t, err)
	assert.Equal(t, "nothing-compared", rep.Verdict)
	assert.Zero(t, rep.Compared)
}

// The JSON report keeps the field names docs/tolerances.md documents, and
// an infinite error is written as the largest float64.
func TestReportJSON(t *testing.T) {
	c := newCheck("layers.0.v", "forced", []float32{1}, []float32{1, 2}, BarFor(densePathOf(1), false))
	assert.False(t, c.OK)
	rep := Report{Schema: TraceSchema, Checks: []Check{c}, First: &c, Verdict: "differ"}
	data, err := json.Marshal(rep)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	for _, k := range []string{"schema", "backend", "reference", "mode", "precision", "tokens", "layers", "compared", "failed", "first_failure", "verdict", "checks"} {
		assert.Contains(t, raw, k)
	}
	check := raw["checks"].([]any)[0].(map[string]any)
	for _, k := range []string{"stage", "mode", "rel_l2", "max_abs_scaled", "tol_rel_l2", "tol_max_abs_scaled", "reduction_length", "ok"} {
		assert.Contains(t, check, k)
	}
	assert.Equal(t, 1.7976931348623157e308, check["rel_l2"])
}
