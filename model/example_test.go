package model_test

import (
	"fmt"

	"github.com/qwenref/qwenref/model"
)

// A config.json in the flat form that transformers writes for
// Qwen3_5ForCausalLM. full_attention_interval 4 makes every fourth layer a
// full-attention layer and the others Gated DeltaNet layers.
const tinyConfig = `{
  "model_type": "qwen3_5_text", "vocab_size": 160, "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 4, "full_attention_interval": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "linear_key_head_dim": 16, "linear_value_head_dim": 24, "linear_conv_kernel_dim": 4,
  "rms_norm_eps": 1e-6,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
}`

func ExampleParseConfig() {
	cfg, err := model.ParseConfig([]byte(tinyConfig))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("layers:", cfg.LayerTypes)
	fmt.Println("conv channels 2·n_k·d_k + n_v·d_v:", cfg.ConvDim())
	fmt.Println("rotary dims per attention head:", cfg.RotaryDim(), "of", cfg.HeadDim)
	// Output:
	// layers: [linear_attention linear_attention linear_attention full_attention]
	// conv channels 2·n_k·d_k + n_v·d_v: 160
	// rotary dims per attention head: 8 of 32
}

// The 27B shape: 48 Gated DeltaNet and 16 attention layers, and the
// parameter count of the text model as Qwen3_5ForCausalLM holds it (no
// vision tower, no multi-token-prediction head).
func ExampleConfig_TextParams() {
	cfg, err := model.ShapeConfig("27b")
	if err != nil {
		fmt.Println(err)
		return
	}
	lin, full := cfg.CountLayers()
	fmt.Printf("%d layers: %d Gated DeltaNet, %d attention\n", cfg.NumLayers, lin, full)
	fmt.Printf("text parameters: %d (%.2f B)\n", cfg.TextParams(), float64(cfg.TextParams())/1e9)
	// Output:
	// 64 layers: 48 Gated DeltaNet, 16 attention
	// text parameters: 26895998464 (26.90 B)
}

// Build a tiny model with random weights and run three tokens through the
// naive backend: one row of logits per token, one logit per vocabulary entry.
func ExampleNewRandom() {
	cfg, err := model.ParseConfig([]byte(tinyConfig))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := model.NewRandom(cfg, 1, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	be, err := model.ParseBackend("naive")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer be.Close()
	logits, err := m.NewSession().Forward([]int{5, 17, 42}, be, model.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("logits shape:", logits.Shape)
	// Output: logits shape: [3 160]
}
