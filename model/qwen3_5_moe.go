package model

// qwen35MoE is the Qwen3.5/3.6 mixture-of-experts family (35B-A3B,
// 122B-A10B, 397B-A17B): every layer's MLP is the sparse block (router,
// routed experts, a shared expert behind a sigmoid gate), and the GDN and
// attention layers are the dense family's (docs/moe.md).
//
// transformers 5.17's qwen3_5_moe has no norm_topk_prob,
// decoder_sparse_step or mlp_only_layers: it always renormalises the
// chosen probabilities and every layer is sparse, so those keys are
// ignored here as transformers ignores them.
var qwen35MoE = &family{
	name:       "qwen3_5_moe",
	modelTypes: []string{"qwen3_5_moe", "qwen3_5_moe_text"},
	wrapper:    "qwen3_5_moe",
	prefixes:   qwenPrefixes,
	sparse:     true,
	parse: func(c *Config, t *rawText) error {
		if err := c.parseMoE(t); err != nil {
			return err
		}
		c.MoE.NormTopKProb, c.MoE.SparseEveryLayer, c.MoE.DecoderSparseStep = true, true, 1
		return nil
	},
}
