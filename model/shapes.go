package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// shapeConfigs are named model shapes for benchmarks, synthetic checkpoints
// and the bundled default, as hub-form config.json text. The 27B values are
// those of docs/spec.md §1.1; the others follow §1.2.
var shapeConfigs = map[string]string{
	"27b":  hubConfig(5120, 64, 24, 4, 256, 16, 48, 128, 128, 17408, 248320, false, 1e7, "[11,11,10]"),
	"9b":   hubConfig(4096, 32, 16, 4, 256, 16, 32, 128, 128, 12288, 248320, false, 1e7, "[11,11,10]"),
	"4b":   hubConfig(2560, 32, 16, 4, 256, 16, 32, 128, 128, 9216, 248320, true, 1e7, "[11,11,10]"),
	"0.8b": hubConfig(1024, 24, 8, 2, 256, 16, 16, 128, 128, 3584, 248320, true, 1e7, "[11,11,10]"),
	// tiny: the bundled default's dims (vocab set to the tokenizer's at use).
	"tiny": hubConfig(64, 8, 4, 1, 32, 2, 6, 16, 16, 128, 151936, true, 1e7, "[2,1,1]"),
	// 35b-a3b: Qwen3.5/3.6-35B-A3B, transformers 5.17's Qwen3_5MoeTextConfig
	// defaults (the 35B-A3B): 40 layers, 256 experts of width 512, top-8,
	// one shared expert of width 512 (docs/moe.md).
	"35b-a3b": moeHubConfig(2048, 40, 16, 2, 256, 16, 32, 128, 128, 256, 8, 512, 512, 248320),
	// 80b-a3b: Qwen3-Next-80B-A3B as transformers 5.17's Qwen3NextConfig
	// defaults give it: 48 layers, 512 experts of width 512, top-10,
	// renormalised, one shared expert of width 512, every layer sparse, the
	// fused in_proj_qkvz / in_proj_ba layout, RoPE θ 1e4 on a quarter of
	// each head (the class default; the released checkpoint's config.json
	// says 1e7). About 80B parameters, 160 GB in bf16: use --layers.
	"80b-a3b": `{"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next","vocab_size":151936,
"hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":48,"full_attention_interval":4,
"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"linear_num_key_heads":16,
"linear_num_value_heads":32,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_conv_kernel_dim":4,
"num_experts":512,"num_experts_per_tok":10,"norm_topk_prob":true,"decoder_sparse_step":1,"mlp_only_layers":[],
"moe_intermediate_size":512,"shared_expert_intermediate_size":512,"rms_norm_eps":1e-6,"hidden_act":"silu",
"max_position_embeddings":32768,"rope_theta":10000,"partial_rotary_factor":0.25,"tie_word_embeddings":false}`,
	// tiny-moe: a small qwen3_5_moe for tests and benchmarks.
	"tiny-moe": moeHubConfig(64, 4, 4, 1, 32, 2, 4, 16, 16, 16, 4, 32, 48, 512),
}

// moeHubConfig is hubConfig for qwen3_5_moe: the MLP keys are the experts'.
func moeHubConfig(h, layers, nh, nkv, dh, nk, nv, dk, dv, experts, topK, moeInter, sharedInter, vocab int) string {
	return fmt.Sprintf(`{"architectures":["Qwen3_5MoeForConditionalGeneration"],"model_type":"qwen3_5_moe",
"tie_word_embeddings":false,"text_config":{"model_type":"qwen3_5_moe_text","hidden_size":%d,"num_hidden_layers":%d,
"full_attention_interval":4,"num_attention_heads":%d,"num_key_value_heads":%d,"head_dim":%d,
"linear_num_key_heads":%d,"linear_num_value_heads":%d,"linear_key_head_dim":%d,"linear_value_head_dim":%d,
"linear_conv_kernel_dim":4,"num_experts":%d,"num_experts_per_tok":%d,"moe_intermediate_size":%d,
"shared_expert_intermediate_size":%d,"vocab_size":%d,"rms_norm_eps":1e-6,"hidden_act":"silu",
"max_position_embeddings":262144,"rope_parameters":{"rope_type":"default","rope_theta":1e7,
"partial_rotary_factor":0.25,"mrope_section":%s,"mrope_interleaved":true}}}`,
		h, layers, nh, nkv, dh, nk, nv, dk, dv, experts, topK, moeInter, sharedInter, vocab, mropeSections(dh/4))
}

// mropeSections splits a rotary dim's r/2 frequencies into time, height
// and width sections as the released configs do ([11,11,10] for 64).
func mropeSections(rotary int) string {
	half := rotary / 2
	b, rem := half/3, half%3
	return fmt.Sprintf("[%d,%d,%d]", b+min(rem, 1), b+rem/2, b)
}

func hubConfig(h, layers, nh, nkv, dh, nk, nv, dk, dv, inter, vocab int, tied bool, theta float64, mrope string) string {
	return fmt.Sprintf(`{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5",
"tie_word_embeddings":%t,"text_config":{"model_type":"qwen3_5_text","hidden_size":%d,"num_hidden_layers":%d,
"full_attention_interval":4,"num_attention_heads":%d,"num_key_value_heads":%d,"head_dim":%d,
"linear_num_key_heads":%d,"linear_num_value_heads":%d,"linear_key_head_dim":%d,"linear_value_head_dim":%d,
"linear_conv_kernel_dim":4,"intermediate_size":%d,"vocab_size":%d,"rms_norm_eps":1e-6,"hidden_act":"silu",
"max_position_embeddings":262144,"rope_parameters":{"rope_type":"default","rope_theta":%g,
"partial_rotary_factor":0.25,"mrope_section":%s,"mrope_interleaved":true}}}`,
		tied, h, layers, nh, nkv, dh, nk, nv, dk, dv, inter, vocab, theta, mrope)
}

// ShapeNames lists the named shapes.
func ShapeNames() []string {
	var n []string
	for k := range shapeConfigs {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// ShapeConfig returns the config of a named shape (e.g. "27b").
func ShapeConfig(name string) (*Config, error) {
	js, ok := shapeConfigs[strings.ToLower(name)]
	if !ok {
		return nil, fmt.Errorf("unknown shape %q (known: %s)", name, strings.Join(ShapeNames(), ", "))
	}
	return ParseConfig([]byte(js))
}

// ShapeConfigJSON returns the hub-form config.json text of a named shape.
func ShapeConfigJSON(name string) ([]byte, error) {
	js, ok := shapeConfigs[strings.ToLower(name)]
	if !ok {
		return nil, fmt.Errorf("unknown shape %q (known: %s)", name, strings.Join(ShapeNames(), ", "))
	}
	return []byte(js), nil
}

// ShapeConfigJSONLayers is ShapeConfigJSON with only the first layers
// decoder layers (0 keeps them all), and that config parsed. The layer
// count is set where the shape keeps its text keys, under text_config
// (the hub form) or at the top level (the flat form, as Qwen3-Next's), so
// every named shape takes every count; an explicit layer_types list is cut
// to the same length and mlp_only_layers keeps the layers that remain.
func ShapeConfigJSONLayers(name string, layers int) ([]byte, *Config, error) {
	js, err := ShapeConfigJSON(name)
	if err != nil {
		return nil, nil, err
	}
	if layers < 0 || layers > MaxLayers {
		return nil, nil, fmt.Errorf("%d layers: want 0 (all) to %d", layers, MaxLayers)
	}
	if layers > 0 {
		if js, err = withLayers(js, layers); err != nil {
			return nil, nil, fmt.Errorf("shape %s: %w", name, err)
		}
	}
	cfg, err := ParseConfig(js)
	if err != nil {
		return nil, nil, fmt.Errorf("shape %s: %w", name, err)
	}
	return js, cfg, nil
}

// withLayers rewrites a shape's config.json text for n layers.
func withLayers(js []byte, n int) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // keeps 1e-6 and 1e7 as written
	var top map[string]any
	if err := dec.Decode(&top); err != nil {
		return nil, err
	}
	text := top
	if tc, ok := top["text_config"].(map[string]any); ok {
		text = tc
	}
	text["num_hidden_layers"] = n
	if lt, ok := text["layer_types"].([]any); ok && len(lt) > n {
		text["layer_types"] = lt[:n]
	}
	if mlp, ok := text["mlp_only_layers"].([]any); ok {
		text["mlp_only_layers"] = slices.DeleteFunc(mlp, func(v any) bool {
			num, _ := v.(json.Number)
			i, err := num.Int64()
			return err == nil && i >= int64(n)
		})
	}
	return json.MarshalIndent(top, "", "  ")
}
