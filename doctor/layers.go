package doctor

import (
	"fmt"

	"github.com/qwenref/qwenref/cuda"
	"github.com/qwenref/qwenref/model"
)

// Layers counts a model's decoder layers by kind, from its config.json.
type Layers struct {
	Config string `json:"config"` // the path it was read from
	Total  int    `json:"layers"`
	Linear int    `json:"linear"` // Gated DeltaNet layers: the ones that fall back
	Full   int    `json:"full"`   // gated full-attention layers: no GDN kernel in them
	// ModelType is the config's model_type (qwen3_5, qwen3_5_moe, qwen3_next, …).
	ModelType string `json:"model_type,omitempty"`
	// MoE counts the layers whose MLP is a mixture of experts, of Experts
	// experts with ExpertsPerToken chosen per token; their GDN mixers fall
	// back exactly as the dense models' do.
	MoE             int `json:"moe_layers,omitempty"`
	Experts         int `json:"experts,omitempty"`
	ExpertsPerToken int `json:"experts_per_token,omitempty"`
	// FusedGDNProjections marks Qwen3-Next's in_proj_qkvz/in_proj_ba layout.
	FusedGDNProjections bool `json:"fused_gdn_projections,omitempty"`
	// QwenrefCUDA says why qwenref's device-resident cuda backend cannot
	// hold this model as it holds the released sizes ("" when it can).
	QwenrefCUDA string `json:"qwenref_cuda,omitempty"`
}

// qwenrefCUDA is Layers.QwenrefCUDA for cfg: the resident backend runs
// the dense and MoE models whose head dims (and router limits) its kernels have.
func qwenrefCUDA(cfg *model.Config) string {
	if err := cuda.SupportsResident(cfg); err != nil {
		return err.Error()
	}
	return ""
}

// LayersFromConfig reads a checkpoint directory's config.json (or the file itself), in the hub
// form (text_config) or the flat one, with layer_types or full_attention_interval, for the
// dense Qwen3.5/3.6 models, their MoE checkpoints (qwen3_5_moe) and Qwen3-Next.
func LayersFromConfig(path string) (*Layers, error) {
	cfg, err := model.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	linear, full := cfg.CountLayers()
	if linear+full != cfg.NumLayers {
		return nil, fmt.Errorf("config %s: %d layer types for %d layers", path, linear+full, cfg.NumLayers)
	}
	return &Layers{Config: path, Total: cfg.NumLayers, Linear: linear, Full: full, ModelType: cfg.ModelType,
		MoE: cfg.SparseLayers(), Experts: cfg.MoE.NumExperts, ExpertsPerToken: cfg.MoE.NumExpertsPerTok,
		FusedGDNProjections: cfg.FusedGDNProjections, QwenrefCUDA: qwenrefCUDA(cfg)}, nil
}
