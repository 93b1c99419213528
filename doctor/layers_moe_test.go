package doctor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// The MoE and Qwen3-Next configs count like the dense ones, plus their
// sparse layers: the 35B-A3B has 30 GDN and 10 attention layers, all 40 of
// them MoE; a Qwen3-Next config with decoder_sparse_step 2 has half. Both
// have the released head dims, so the resident cuda backend holds them.
func TestLayersFromMoEConfigs(t *testing.T) {
	dir := t.TempDir()
	js, err := model.ShapeConfigJSON("35b-a3b")
	require.NoError(t, err)
	p := filepath.Join(dir, "moe.json")
	require.NoError(t, os.WriteFile(p, js, 0o644))
	l, err := LayersFromConfig(p)
	require.NoError(t, err)
	assert.Equal(t, Layers{Config: p, Total: 40, Linear: 30, Full: 10, ModelType: "qwen3_5_moe", MoE: 40, Experts: 256, ExpertsPerToken: 8}, *l)

	next := `{"model_type":"qwen3_next","vocab_size":151936,"hidden_size":2048,"intermediate_size":5120,
"num_hidden_layers":48,"full_attention_interval":4,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,
"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_key_head_dim":128,"linear_value_head_dim":128,
"num_experts":512,"num_experts_per_tok":10,"decoder_sparse_step":2,"moe_intermediate_size":512,
"shared_expert_intermediate_size":512,"rope_theta":10000000,"partial_rotary_factor":0.25}`
	p = filepath.Join(dir, "next.json")
	require.NoError(t, os.WriteFile(p, []byte(next), 0o644))
	l, err = LayersFromConfig(p)
	require.NoError(t, err)
	assert.Equal(t, Layers{Config: p, Total: 48, Linear: 36, Full: 12, ModelType: "qwen3_next", MoE: 24, Experts: 512,
		ExpertsPerToken: 10, FusedGDNProjections: true}, *l)
}

// A dense config says why the resident cuda backend would not hold it when
// its head dims are not the released sizes', and nothing when they are.
func TestLayersSayWhatCUDAHolds(t *testing.T) {
	dir := t.TempDir()
	for shape, want := range map[string]string{"27b": "", "0.8b": "", "tiny": "the device-resident model needs GDN head dims 128/128"} {
		js, err := model.ShapeConfigJSON(shape)
		require.NoError(t, err)
		p := filepath.Join(dir, shape+".json")
		require.NoError(t, os.WriteFile(p, js, 0o644))
		l, err := LayersFromConfig(p)
		require.NoError(t, err)
		if want == "" {
			assert.Empty(t, l.QwenrefCUDA, shape)
		} else {
			assert.Contains(t, l.QwenrefCUDA, want, shape)
			assert.NotContains(t, l.QwenrefCUDA, "shape not supported", shape)
		}
	}
}
