package doctor

import (
	"fmt"

	"github.com/qwenref/qwenref/model"
)

// Layers counts a model's decoder layers by kind, from its config.json.
type Layers struct {
	Config string `json:"config"` // the path it was read from
	Total  int    `json:"layers"`
	Linear int    `json:"linear"` // Gated DeltaNet layers: the ones that fall back
	Full   int    `json:"full"`   // gated full-attention layers: no GDN kernel in them
}

// LayersFromConfig reads a checkpoint directory's config.json (or the file itself), in the hub
// form (text_config) or the flat one, with layer_types or full_attention_interval.
func LayersFromConfig(path string) (*Layers, error) {
	cfg, err := model.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	linear, full := cfg.CountLayers()
	if linear+full != cfg.NumLayers {
		return nil, fmt.Errorf("config %s: %d layer types for %d layers", path, linear+full, cfg.NumLayers)
	}
	return &Layers{Config: path, Total: cfg.NumLayers, Linear: linear, Full: full}, nil
}
