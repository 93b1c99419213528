package model

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/weights"
)

// Load walks the model's tensors once: the check, the binding, the
// small-tensor scan and the names it saw come from one walk, and the
// unused-tensor warnings (an extra tensor, a tied model's own head) are
// the ones the separate passes gave.
func TestLoadWalksOnce(t *testing.T) {
	dir := t.TempDir()
	js := fmt.Appendf(nil, recipeConfig, "qwen3_5_text")
	cfg, err := ParseConfig(js)
	require.NoError(t, err)
	require.NoError(t, WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 3}))
	// Tie the model and add a stray tensor: both are reported, in order.
	st, err := OpenWeights(dir)
	require.NoError(t, err)
	var ts []weights.NamedTensor
	for _, n := range st.Names() {
		info, _ := st.Info(n)
		v, _, err := st.Float32(n)
		require.NoError(t, err)
		ts = append(ts, weights.NamedTensor{Name: info.Stored, DType: info.DType, Shape: info.Shape, Data: v})
	}
	require.NoError(t, st.Close())
	ts = append(ts, weights.NamedTensor{Name: "model.layers.0.stray.weight", DType: "F32", Shape: []int{2}, Data: []float32{1, 2}})
	for _, f := range []string{"model.safetensors", "model.safetensors.index.json"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil))
	tied := strings.Replace(string(js), `"tie_word_embeddings":false`, `"tie_word_embeddings":true`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(tied), 0o644))

	before := walks.Load()
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	assert.Equal(t, int64(1), walks.Load()-before, "walks of the tensor list in Load")
	assert.Equal(t, []string{
		"tie_word_embeddings is true: lm_head.weight in the checkpoint is ignored",
		`tensors not used by this config: "layers.0.stray.weight"`,
	}, m.Warnings)
}

// A runner's forward pass checks its ids once on their way to the
// embedding (CheckBatch), not again in the session each row runs on.
func TestRunnerChecksIDsOnce(t *testing.T) {
	cfg, err := ParseConfig(fmt.Appendf(nil, recipeConfig, "qwen3_5_text"))
	require.NoError(t, err)
	m, err := NewRandom(cfg, 1, false)
	require.NoError(t, err)
	be, err := ParseBackend("naive")
	require.NoError(t, err)
	r, err := NewRunner(m, be, 1)
	require.NoError(t, err)
	defer r.Close()
	before := idChecks.Load()
	_, err = r.Forward([][]int{{1, 2, 3}}, RunOptions{Logits: LastLogits})
	require.NoError(t, err)
	assert.Equal(t, int64(1), idChecks.Load()-before)
	_, err = r.Forward([][]int{{1, 96}}, RunOptions{Logits: LastLogits})
	require.ErrorContains(t, err, "token id 96 at position 1 is outside the vocabulary [0, 96)")
}
