package model

import (
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
		{"mlp_only_layers 1.5", hostileBase(`,"mlp_only_layers":[1.5]`), "", "mlp_only_layers[0]: want an integer, got JSON number 1.5"},
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
