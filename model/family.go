package model

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/qwenref/qwenref/weights"
)

// A family is one kind of checkpoint: the model_type values it is read
// from, its own config keys, and how its stored tensors differ from the
// parts every family shares. Each family is one file (qwen3_5.go,
// qwen3_5_moe.go, qwen3_next.go); docs/architecture.md says how to add one.
//
// What all families share is declared by the weight structs' tags (the
// layer packages' LayerWeights, MLP, moe.Weights, Block and Model below):
// the walker in weights.Walk turns those tags into the expected-tensor
// list, the binding from a checkpoint, the unused-tensor report, the
// non-finite scan, random weights and synthetic checkpoints.
type family struct {
	name       string
	modelTypes []string // the model_type values this family reads
	// wrapper is the model_type of the hub (VLM) form, whose text keys sit
	// under text_config; "" when the family has none.
	wrapper string
	// prefixes are where its checkpoints keep the text model's tensors.
	prefixes storedPrefixes
	sparse   bool // has mixture-of-experts layers (intermediate_size may be absent)
	// parse reads the family's own keys after the shared ones; it decodes
	// them from t.raw, the text config's JSON object, into its own struct.
	parse func(c *Config, t *rawText) error
	// sizes sets the family's shape symbols and flags.
	sizes func(c *Config, s weights.Sizes)
	// stored runs on every layer before the walk: it returns the parts
	// only this family stores for the layer (a tagged struct whose names
	// are in full under the layer's prefix, kept in Block.Stored; nil for
	// none) and the shared fields they replace (pointers into the block,
	// e.g. &b.MLP.Gate), which the walk then skips.
	stored func(c *Config, b *Block) (parts any, replaces []any)
	// derive runs on every layer after binding and fills the replaced
	// fields from the stored parts.
	derive func(c *Config, b *Block) error
}

// storedPrefixes are the name prefixes of a family's checkpoints: hub for
// the hub (VLM) form's text model, flat for the flat form's, and skipped
// for tensors that are not the text model's (a vision tower, an MTP head).
type storedPrefixes struct {
	hub, flat string
	skipped   []string
}

// qwenPrefixes are the Qwen3.5/3.6 and Qwen3-Next layouts: the hub form
// under model.language_model., the flat form under model., the vision
// tower and the multi-token prediction head skipped.
var qwenPrefixes = storedPrefixes{hub: "model.language_model.", flat: "model.", skipped: []string{"model.visual.", "mtp."}}

// families are the registered families, in the order errors list them.
var families = []*family{qwen35, qwen35MoE, qwen3Next}

// familyOf returns the family of a model_type, or nil.
func familyOf(modelType string) *family {
	for _, f := range families {
		if slices.Contains(f.modelTypes, modelType) {
			return f
		}
	}
	return nil
}

// configFamily is the config's family; a config built in code without a
// known model_type is the dense qwen3_5.
func (c *Config) configFamily() *family {
	if f := familyOf(c.ModelType); f != nil {
		return f
	}
	return qwen35
}

// modelTypeList names every model_type qwenref reads, for errors.
func modelTypeList() string {
	var all []string
	for _, f := range families {
		all = append(all, f.modelTypes...)
	}
	return strings.Join(all[:len(all)-1], ", ") + " or " + all[len(all)-1]
}

// canonical maps a stored tensor name to the text model's canonical
// name, or reports that the tensor is skipped.
func (p storedPrefixes) canonical(stored string) (string, bool) {
	for _, s := range p.skipped {
		if strings.HasPrefix(stored, s) {
			return "", true
		}
	}
	if c, ok := strings.CutPrefix(stored, p.hub); ok && p.hub != "" {
		return c, false
	}
	if c, ok := strings.CutPrefix(stored, p.flat); ok && p.flat != "" {
		return c, false
	}
	return stored, false
}

// OpenWeights maps a checkpoint's tensors under their canonical names,
// as Load does (for tools that read a checkpoint's tensors directly); the
// family of its config.json names them, the Qwen3.5 layout when the
// config cannot be read.
func OpenWeights(dir string) (*weights.Store, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return openWeights(dir, qwen35)
	}
	return openWeights(dir, cfg.configFamily())
}

// openWeights maps a checkpoint's tensors under fam's canonical names.
func openWeights(dir string, fam *family) (*weights.Store, error) {
	return weights.OpenNamed(dir, fam.prefixes.canonical)
}

// Sizes are the shape symbols of the config's tensors (docs/spec.md §1):
// H, V, I, C, K, n_k, d_k, n_v, d_v, n_h, n_kv, d_h, and for the sparse
// families E, I_e, I_s; flags: untied (the head is its own tensor) and
// what the family's sizes hook adds.
func (c *Config) Sizes() weights.Sizes {
	s := weights.Sizes{
		"H": c.HiddenSize, "V": c.VocabSize, "I": c.IntermediateSize,
		"C": c.ConvDim(), "K": c.LinearConvKernel,
		"n_k": c.LinearNumKeyHeads, "d_k": c.LinearKeyHeadDim, "n_v": c.LinearNumValueHeads, "d_v": c.LinearValueHeadDim,
		"n_h": c.NumHeads, "n_kv": c.NumKVHeads, "d_h": c.HeadDim,
		"E": c.MoE.NumExperts, "I_e": c.MoE.IntermediateSize, "I_s": c.MoE.SharedIntermediate,
		"separate_in_proj": 1,
	}
	if !c.TieWordEmbeddings {
		s["untied"] = 1
	}
	if f := c.configFamily(); f.sizes != nil {
		f.sizes(c, s)
	}
	return s
}

// walks counts walkTensors' walks, so that a test holds Load to one.
var walks atomic.Int64

// walkTensors visits every tensor m declares, in checkpoint order, but the
// shared fields a family's stored parts replace.
func walkTensors(m *Model, visit func(weights.Field) error) error {
	walks.Add(1)
	var skip []any
	for i := range m.Blocks {
		skip = append(skip, m.Blocks[i].replaced...)
	}
	if len(skip) == 0 {
		return weights.Walk(m, "", m.Config.Sizes(), visit)
	}
	return weights.Walk(m, "", m.Config.Sizes(), func(f weights.Field) error {
		for _, p := range skip {
			if f.Is(p) {
				return nil
			}
		}
		return visit(f)
	})
}
