package model

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// config.json and generation_config.json are read strictly: what
// encoding/json quietly accepted (invalid UTF-8, a key twice, a key in
// another case, [null] as [0]) is refused naming the file and the key.
func TestConfigStrictJSON(t *testing.T) {
	for _, c := range []struct{ name, config, gen, want string }{
		{"invalid UTF-8", hostileBase(",\"architectures\":[\"Qwen\xff\"]"), "", "config.json: invalid UTF-8 at byte"},
		{"a key twice", hostileBase(`,"rms_norm_eps":1e-6,"rms_norm_eps":1e-5`), "", `config.json: the key "rms_norm_eps" appears twice at the top level`},
		{"a key twice in text_config", `{"model_type":"qwen3_5","text_config":{"hidden_size":8,"hidden_size":8}}`, "", `the key "hidden_size" appears twice in text_config`},
		{"a key in another case", hostileBase(`,"RMS_NORM_EPS":1`), "", `the key "RMS_NORM_EPS" is not rms_norm_eps`},
		{"generation config key twice", hostileBase(""), `{"eos_token_id":1,"eos_token_id":2}`, `generation_config.json: the key "eos_token_id" appears twice`},
		{"mlp_only_layers null", `{"model_type":"qwen3_next","vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
			"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":4,"linear_value_head_dim":4,"num_experts":2,"num_experts_per_tok":1,
			"moe_intermediate_size":4,"shared_expert_intermediate_size":4,"mlp_only_layers":[null]}`, "", "mlp_only_layers[0]: want an integer, got JSON null"},
		{"mlp_only_layers 1.5", `{"model_type":"qwen3_next","vocab_size":10,"hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
			"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":4,"linear_value_head_dim":4,"num_experts":2,"num_experts_per_tok":1,
			"moe_intermediate_size":4,"shared_expert_intermediate_size":4,"mlp_only_layers":[1.5]}`, "", "mlp_only_layers[0]: want an integer, got JSON number 1.5"},
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o644))
		if c.gen != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(c.gen), 0o644))
		}
		_, err := LoadConfig(dir)
		assert.ErrorContains(t, err, c.want, c.name)
	}
}

// A legacy rope_scaling is read as transformers 5 reads it: a non-empty
// one replaces rope_parameters whole, beside it or instead of it (so a
// yarn scaling is refused, not run as default RoPE); an empty or null one
// leaves rope_parameters in force.
func TestConfigLegacyRopeScaling(t *testing.T) {
	rp := `,"rope_parameters":{"rope_type":"default","rope_theta":1e7,"partial_rotary_factor":0.25}`
	for _, c := range []struct{ name, extra, want string }{
		{"yarn beside rope_parameters", rp + `,"rope_scaling":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":32768}`, `rope_scaling: rope_type "yarn" is not supported`},
		{"yarn by its old key", rp + `,"rope_scaling":{"type":"yarn","factor":4}`, `rope_scaling: rope_type "yarn" is not supported`},
		{"yarn instead", `,"rope_scaling":{"rope_type":"yarn","factor":4}`, `rope_scaling: rope_type "yarn" is not supported`},
		{"not an object", `,"rope_scaling":[1]`, "rope_scaling: want an object, got JSON array"},
		{"a bad key", `,"rope_scaling":{"rope_theta":"big"}`, "rope_scaling.rope_theta: want a number, got JSON string"},
	} {
		_, err := ParseConfig([]byte(hostileBase(c.extra)))
		assert.ErrorContains(t, err, c.want, c.name)
	}
	for _, c := range []struct {
		name, extra string
		theta       float64
	}{
		{"empty rope_scaling", rp + `,"rope_scaling":{}`, 1e7},
		{"null rope_scaling", rp + `,"rope_scaling":null`, 1e7},
		{"default rope_scaling replaces rope_parameters", rp + `,"rope_scaling":{"rope_type":"default","rope_theta":5e5}`, 5e5},
		{"rope_scaling without θ: the top-level key", rp + `,"rope_theta":2e4,"rope_scaling":{"type":"default"}`, 2e4},
	} {
		cfg, err := ParseConfig([]byte(hostileBase(c.extra)))
		if assert.NoError(t, err, c.name) {
			assert.Equal(t, c.theta, cfg.RopeTheta, c.name)
		}
	}
}

// mrope_section is held to the rotary dim: three non-negative sections
// summing to half of it. The expected sums come from the parsed config.
func TestConfigMRopeSection(t *testing.T) {
	withSection := func(s string) string {
		return hostileBase(`,"rope_parameters":{"rope_type":"default","rope_theta":1e7,"partial_rotary_factor":1,"mrope_section":` + s + `}`)
	}
	good, err := ParseConfig([]byte(withSection("null")))
	require.NoError(t, err)
	half := good.RotaryDim() / 2
	ok := fmt.Sprintf("[%d,%d,0]", half-1, 1)
	cfg, err := ParseConfig([]byte(withSection(ok)))
	require.NoError(t, err)
	assert.Equal(t, []int{half - 1, 1, 0}, cfg.MRopeSection)
	for _, c := range []struct{ section, want string }{
		{fmt.Sprintf("[%d,1,0]", half), fmt.Sprintf("sums to %d: want %d", half+1, half)},
		{fmt.Sprintf("[%d,1,0]", half-2), fmt.Sprintf("sums to %d: want %d", half-1, half)},
		{fmt.Sprintf("[-1,%d,1]", half), "mrope_section[0] is -1"},
		{"[1000000000,1000000000,1000000000]", fmt.Sprintf("mrope_section[0] is 1000000000: want 0 to %d", half)},
		{fmt.Sprintf("[%d,0]", half), "mrope_section has 2 entries: want 3"},
		{"[1,null,1]", "rope_parameters.mrope_section[1]: want an integer, got JSON null"},
	} {
		_, err := ParseConfig([]byte(withSection(c.section)))
		assert.ErrorContains(t, err, c.want, c.section)
	}
}
