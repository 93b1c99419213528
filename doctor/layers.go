package doctor

import (
	"errors"
	"fmt"

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
	// hold this model as it holds the released sizes, or cannot start here
	// at all ("" when it holds it).
	QwenrefCUDA string `json:"qwenref_cuda,omitempty"`
}

// CUDABackend is the registered backend whose device part Layers asks
// about the model; the qwenref command links it in.
const CUDABackend = "cuda"

// qwenrefCUDA is Layers.QwenrefCUDA for cfg: what the cuda backend's
// device part (model.Device.Supports) says of the model, the head dims and
// router limits of its resident kernels.
func qwenrefCUDA(cfg *model.Config) string {
	be, err := model.ParseBackend(CUDABackend)
	if err != nil {
		return fmt.Sprintf("the %s backend cannot start here: %v", CUDABackend, err)
	}
	var why error
	if be.Device != nil && be.Device.Supports != nil {
		why = be.Device.Supports(cfg)
	}
	if be.Release != nil {
		why = errors.Join(why, be.Release())
	}
	if why != nil {
		return why.Error()
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
