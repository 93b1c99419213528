package model

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfig27B(t *testing.T) {
	cfg, err := LoadConfig("../testdata/configs/qwen3.5-27b.json")
	require.NoError(t, err)
	lin, full := cfg.CountLayers()
	assert.Equal(t, 48, lin)
	assert.Equal(t, 16, full)
	// Layers 3, 7, …, 63 are full attention (spec §1.1).
	for i, k := range cfg.LayerTypes {
		assert.Equal(t, (i+1)%4 == 0, k == FullAttention, "layer %d", i)
	}
	// Measured by transformers on the meta device (spec §1.3).
	assert.Equal(t, int64(26_895_998_464), cfg.TextParams())
	assert.Equal(t, 10240, cfg.ConvDim())
	assert.Equal(t, 64, cfg.RotaryDim())
	assert.Equal(t, 1e7, cfg.RopeTheta)
	assert.Equal(t, []int{11, 11, 10}, cfg.MRopeSection)
	assert.False(t, cfg.TieWordEmbeddings)
	assert.Equal(t, "Qwen3_5ForConditionalGeneration", cfg.Architecture)
}

func TestConfigGoldensParse(t *testing.T) {
	for _, c := range []struct {
		dir       string
		tied      bool
		lin, full int
		eos       []int
	}{
		{"causal-f32-t70-b2", true, 3, 1, nil},
		{"hub-bf16-sharded", false, 6, 2, []int{3, 7}},
		{"causal-f16-t130", false, 2, 2, nil},
	} {
		cfg, err := LoadConfig(filepath.Join("../testdata/golden", c.dir))
		require.NoError(t, err, c.dir)
		lin, full := cfg.CountLayers()
		assert.Equal(t, c.lin, lin, c.dir)
		assert.Equal(t, c.full, full, c.dir)
		assert.Equal(t, c.tied, cfg.TieWordEmbeddings, c.dir)
		assert.Equal(t, c.eos, cfg.EOSTokenIDs, c.dir)
	}
}

func TestConfigFallbacks(t *testing.T) {
	flat := `{"model_type":"qwen3_5_text","vocab_size":10,"hidden_size":8,"intermediate_size":8,
	"num_hidden_layers":8,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
	"linear_num_key_heads":1,"linear_num_value_heads":2,"linear_key_head_dim":4,"linear_value_head_dim":4,
	"rope_theta":500,"partial_rotary_factor":0.5,"eos_token_id":3}`
	cfg, err := ParseConfig([]byte(flat))
	require.NoError(t, err)
	assert.Equal(t, 500.0, cfg.RopeTheta, "top-level rope_theta is the fallback")
	assert.Equal(t, 0.5, cfg.PartialRotaryFactor)
	assert.Equal(t, 4, cfg.LinearConvKernel, "transformers' default conv kernel")
	assert.Equal(t, []int{3}, cfg.EOSTokenIDs)
	_, full := cfg.CountLayers()
	assert.Equal(t, 2, full, "default full_attention_interval is 4")

	// rope_parameters wins over the top-level keys.
	withRP := flat[:len(flat)-1] + `,"rope_parameters":{"rope_type":"default","rope_theta":1e7,"partial_rotary_factor":0.25}}`
	cfg, err = ParseConfig([]byte(withRP))
	require.NoError(t, err)
	assert.Equal(t, 1e7, cfg.RopeTheta)
	assert.Equal(t, 0.25, cfg.PartialRotaryFactor)
}

func TestConfigErrors(t *testing.T) {
	base := func(extra string) string {
		return `{"model_type":"qwen3_5_text","vocab_size":10,"hidden_size":8,"intermediate_size":8,
		"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
		"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":4,"linear_value_head_dim":4` + extra + `}`
	}
	for _, c := range []struct{ name, json, want string }{
		{"not json", `{`, "invalid JSON"},
		{"no model_type", `{}`, "model_type is missing"},
		{"other model", `{"model_type":"llama"}`, `"llama" is not a Qwen3.5`},
		{"moe", `{"model_type":"qwen3_5_moe"}`, "mixture of experts"},
		{"hub without text_config", `{"model_type":"qwen3_5"}`, "text_config"},
		{"wrong type", `{"model_type":"qwen3_5_text","hidden_size":"big"}`, "hidden_size"},
		{"missing keys", `{"model_type":"qwen3_5_text","vocab_size":3}`, "missing required keys: hidden_size"},
		{"heads ratio", base(`,"linear_num_value_heads":3`), "multiple of linear_num_key_heads"},
		{"gqa ratio", base(`,"num_key_value_heads":3`), "multiple of num_key_value_heads"},
		{"negative", base(`,"hidden_size":-8`), "hidden_size must be positive"},
		{"layer_types length", base(`,"layer_types":["full_attention"]`), "layer_types has 1 entries"},
		{"layer_types value", base(`,"layer_types":["full_attention","moe"]`), `layer_types[1] = "moe"`},
		{"rope type", base(`,"rope_parameters":{"rope_type":"yarn"}`), `rope_type "yarn"`},
		{"act", base(`,"hidden_act":"gelu"`), `hidden_act "gelu"`},
		{"eos range", base(`,"eos_token_id":[1,99]`), "eos_token_id 99 is outside"},
		{"odd rotary", base(`,"partial_rotary_factor":0.375`), "rotary dim"},
		{"huge", base(`,"vocab_size":1000000000000`), "implausibly large"},
	} {
		_, err := ParseConfig([]byte(c.json))
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	_, err := LoadConfig(filepath.Join(t.TempDir(), "nope"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestShapes(t *testing.T) {
	from, err := LoadConfig("../testdata/configs/qwen3.5-27b.json")
	require.NoError(t, err)
	named, err := ShapeConfig("27b")
	require.NoError(t, err)
	assert.Equal(t, from.TextParams(), named.TextParams())
	assert.Equal(t, from.LayerTypes, named.LayerTypes)
	for _, n := range ShapeNames() {
		_, err := ShapeConfig(n)
		assert.NoError(t, err, n)
	}
	_, err = ShapeConfig("70b")
	assert.ErrorContains(t, err, "unknown shape")
}
