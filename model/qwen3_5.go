package model

// qwen35 is the dense Qwen3.5/3.6 family (Qwen3.5-0.8B … 27B, Qwen3.6-27B):
// every layer has the dense SwiGLU MLP, and the tensors are exactly those
// the shared weight structs declare. The hub form (model_type qwen3_5,
// Qwen3_5ForConditionalGeneration) wraps the text keys in text_config and
// the tensors in model.language_model.; the flat form (qwen3_5_text,
// Qwen3_5ForCausalLM) keeps them at the top and under model.
var qwen35 = &family{
	name:       "qwen3_5",
	modelTypes: []string{"qwen3_5", "qwen3_5_text"},
	wrapper:    "qwen3_5",
	prefixes:   qwenPrefixes,
}
