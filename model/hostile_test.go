package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// writeTiny writes a small random checkpoint (flat layout, f32) whose
// tensors can be edited by mutate before writing.
func writeTiny(t *testing.T, mutate func(name string, shape []int, v []float32) ([]int, []float32, bool)) string {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 64
	dir := t.TempDir()
	js, err := ShapeConfigJSON("tiny")
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(js, &raw))
	raw["text_config"].(map[string]any)["vocab_size"] = 64
	data, _ := json.Marshal(raw)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644))
	var ts []weights.NamedTensor
	for _, e := range cfg.ExpectedTensors() {
		shape, v := e.Shape, RandomValues(1, e)
		keep := true
		if mutate != nil {
			shape, v, keep = mutate(e.Name, shape, v)
		}
		if keep {
			ts = append(ts, weights.NamedTensor{Name: "model.language_model." + e.Name, DType: "F32", Shape: shape, Data: v})
		}
	}
	require.NoError(t, weights.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil))
	return dir
}

func TestCheckpointProblemsAreListedTogether(t *testing.T) {
	dir := writeTiny(t, func(name string, shape []int, v []float32) ([]int, []float32, bool) {
		switch name {
		case "layers.0.linear_attn.A_log":
			return nil, nil, false // missing
		case "layers.3.self_attn.q_proj.weight":
			return []int{shape[0] / 2, shape[1]}, v[:len(v)/2], true // wrong shape
		case "norm.weight":
			return []int{shape[0] + 1}, append(v, 0), true
		}
		return shape, v, true
	})
	_, err := Load(dir)
	require.Error(t, err)
	for _, want := range []string{"3 problems", "layers.0.linear_attn.A_log: missing",
		"layers.3.self_attn.q_proj.weight", "norm.weight", "want [64]"} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestNonFiniteWeights(t *testing.T) {
	dir := writeTiny(t, func(name string, shape []int, v []float32) ([]int, []float32, bool) {
		if name == "layers.1.linear_attn.dt_bias" {
			v[2] = float32(math.NaN())
		}
		return shape, v, true
	})
	_, err := Load(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "layers.1.linear_attn.dt_bias has a non-finite value")

	dir = writeTiny(t, func(name string, shape []int, v []float32) ([]int, []float32, bool) {
		if name == "layers.2.mlp.up_proj.weight" {
			v[5] = float32(math.Inf(1))
		}
		return shape, v, true
	})
	m, err := Load(dir)
	require.NoError(t, err, "large matrices are not scanned at load")
	defer m.Close()
	err = m.CheckFinite(nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "layers.2.mlp.up_proj.weight")
	be, _ := ParseBackend("naive")
	_, err = m.NewSession().Forward([]int{1, 2, 3}, be, Options{})
	require.Error(t, err, "the forward pass refuses non-finite logits")
	assert.Contains(t, err.Error(), "non-finite logit")
}

// One model, many goroutines, each with its own session: identical results
// (run under -race in CI). A session shared between goroutines is refused.
func TestConcurrentSessions(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 64
	m, err := NewRandom(cfg, 3, true)
	require.NoError(t, err)
	ids := []int{3, 1, 4, 1, 5, 9, 2, 6}
	for _, backend := range BackendNames() {
		be, err := ParseBackend(backend)
		if err != nil { // a registered GPU backend without a GPU
			t.Logf("skipping backend %s: %v", backend, err)
			continue
		}
		want, err := m.NewSession().Forward(ids, be, Options{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		results := make([]*tensor.Tensor, 4)
		for g := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[g], _ = m.NewSession().Forward(ids, be, Options{})
			}()
		}
		wg.Wait()
		for _, r := range results {
			require.NotNil(t, r)
			assert.Equal(t, want.Data, r.Data, backend)
		}
	}

	s := m.NewSession()
	s.mu.Lock() // as if another goroutine were inside Forward
	be, _ := ParseBackend("naive")
	_, err = s.Forward(ids, be, Options{})
	s.mu.Unlock()
	assert.ErrorContains(t, err, "two goroutines")
}

func FuzzParseConfig(f *testing.F) {
	for _, p := range []string{"../testdata/configs/qwen3.5-27b.json", "../testdata/golden/hub-bf16-sharded/config.json",
		"../testdata/golden/causal-f32-t70-b2/config.json"} {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte(`{"model_type":"qwen3_5_text","num_hidden_layers":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			return
		}
		// Anything accepted must be internally consistent.
		require.NoError(t, cfg.Validate())
		require.Len(t, cfg.LayerTypes, cfg.NumLayers)
		require.Positive(t, cfg.TextParams())
	})
}

// A checkpoint truncated after Load: Prefault and CheckFinite read the
// mapping and must return an error naming the file, not die of SIGBUS.
func TestTruncatedAfterLoad(t *testing.T) {
	dir := writeTiny(t, nil)
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	p := filepath.Join(dir, "model.safetensors")
	require.NoError(t, os.Truncate(p, 4096))
	err = m.Prefault(nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "truncated")
	err = m.CheckFinite(nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
}
