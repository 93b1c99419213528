package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// LayerKind says which token mixer a decoder layer uses.
type LayerKind int

const (
	// LinearAttention is a Gated DeltaNet layer ("linear_attention").
	LinearAttention LayerKind = iota
	// FullAttention is a gated softmax-attention layer ("full_attention").
	FullAttention
)

// String returns the name transformers uses in layer_types.
func (k LayerKind) String() string {
	if mk := mixerOf(k); mk != nil {
		return mk.name
	}
	return fmt.Sprintf("LayerKind(%d)", int(k))
}

// Config holds the text-model hyper-parameters of a Qwen3.5/3.6 checkpoint,
// read from its config.json (docs/spec.md §1, §8).
type Config struct {
	// ModelType is the config's model_type; it picks the family
	// (family.go): qwen3_5 or qwen3_5_text, qwen3_5_moe or
	// qwen3_5_moe_text, qwen3_next (docs/moe.md).
	ModelType    string
	Architecture string // e.g. Qwen3_5ForConditionalGeneration

	VocabSize        int         // V
	HiddenSize       int         // H
	IntermediateSize int         // I, the dense MLP width (0 when every layer is sparse)
	NumLayers        int         // decoder layers
	LayerTypes       []LayerKind // per layer: linear (GDN) or full attention

	NumHeads   int // full attention query heads n_h
	NumKVHeads int // full attention key/value heads n_kv
	HeadDim    int // d_h

	LinearNumKeyHeads   int // n_k
	LinearNumValueHeads int // n_v
	LinearKeyHeadDim    int // d_k
	LinearValueHeadDim  int // d_v
	LinearConvKernel    int // K

	RMSNormEps          float64 // ε of every RMSNorm
	RopeTheta           float64 // RoPE base θ
	PartialRotaryFactor float64 // share of the head dim that rotates
	MRopeSection        []int   // multimodal RoPE sections (identical to 1D RoPE for text)

	TieWordEmbeddings     bool  // lm_head is the embedding
	MaxPositionEmbeddings int   // context length the model was trained for
	EOSTokenIDs           []int // generation stops on these (config.json or generation_config.json)

	MoE MoEConfig // the sparse layers; zero for the dense models

	// FusedGDNProjections is Qwen3-Next's layout: the GDN input
	// projections are stored as two tensors interleaved per key head
	// (qwen3_next.go, docs/spec.md §2.3).
	FusedGDNProjections bool
}

// ConvDim is the conv channel count C = 2·n_k·d_k + n_v·d_v.
func (c *Config) ConvDim() int {
	return 2*c.LinearNumKeyHeads*c.LinearKeyHeadDim + c.LinearNumValueHeads*c.LinearValueHeadDim
}

// RotaryDim is the number of leading head dims that RoPE rotates.
func (c *Config) RotaryDim() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// CountLayers returns how many linear- and full-attention layers there are.
func (c *Config) CountLayers() (linear, full int) {
	for _, k := range c.LayerTypes {
		switch k {
		case FullAttention:
			full++
		case LinearAttention:
			linear++
		}
	}
	return linear, full
}

// TextParams counts the text model's parameters as Qwen3_5ForCausalLM holds
// them (docs/spec.md §1.3): embedding, decoder stack, final norm and an untied head.
func (c *Config) TextParams() int64 {
	h, v := int64(c.HiddenSize), int64(c.VocabSize)
	common := 3*h*int64(c.IntermediateSize) + 2*h
	var total int64
	for i, k := range c.LayerTypes {
		mlp := common
		if c.SparseLayer(i) {
			mlp = c.moeLayerParams(false) + 2*h
		}
		if mk := mixerOf(k); mk != nil {
			total += mk.params(c)
		}
		total += mlp
	}
	total += v*h + h // embedding and final norm
	if !c.TieWordEmbeddings {
		total += v * h
	}
	return total
}

// rawText is the subset of text-config keys qwenref reads. Pointers tell
// "absent" from zero so defaults and fallbacks apply only to absent keys.
type rawText struct {
	ModelType             *string         `json:"model_type"`
	VocabSize             *int            `json:"vocab_size"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	LayerTypes            []string        `json:"layer_types"`
	FullAttentionInterval *int            `json:"full_attention_interval"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	LinearNumKeyHeads     *int            `json:"linear_num_key_heads"`
	LinearNumValueHeads   *int            `json:"linear_num_value_heads"`
	LinearKeyHeadDim      *int            `json:"linear_key_head_dim"`
	LinearValueHeadDim    *int            `json:"linear_value_head_dim"`
	LinearConvKernelDim   *int            `json:"linear_conv_kernel_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	HiddenAct             *string         `json:"hidden_act"`
	RopeTheta             *float64        `json:"rope_theta"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	RopeParameters        *rawRope        `json:"rope_parameters"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	NumExperts            *int            `json:"num_experts"`
	NumExpertsPerTok      *int            `json:"num_experts_per_tok"`
	MoEIntermediateSize   *int            `json:"moe_intermediate_size"`
	SharedExpertInterSize *int            `json:"shared_expert_intermediate_size"`
	Architectures         []string        `json:"architectures"`
	TextConfig            json.RawMessage `json:"text_config"`
	AttentionBias         *bool           `json:"attention_bias"`
	// raw is the text config's JSON object, from which a family decodes
	// the keys only it reads (family.parse).
	raw []byte
}

type rawRope struct {
	RopeType            *string  `json:"rope_type"`
	Type                *string  `json:"type"`
	RopeTheta           *float64 `json:"rope_theta"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	MRopeSection        []int    `json:"mrope_section"`
}

// LoadConfig reads config.json from a checkpoint directory (or a file path)
// and applies generation_config.json's eos ids when present beside it.
//
// Both files are opened without blocking, must be regular files and are
// read up to MaxConfigBytes and MaxGenerationConfigBytes.
func LoadConfig(path string) (*Config, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := safeio.ReadCapped(path, MaxConfigBytes, "config.json")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", safeio.Clean(path), err)
	}
	gpath := filepath.Join(filepath.Dir(path), "generation_config.json")
	if _, err := os.Lstat(gpath); err != nil {
		return cfg, nil // absent (or unreadable directory): config.json's eos ids stand
	}
	g, err := safeio.ReadCapped(gpath, MaxGenerationConfigBytes, "generation_config.json")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var gc struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := strictDecode(g, &gc); err != nil {
		return nil, fmt.Errorf("config %s: %w", safeio.Clean(gpath), err)
	}
	ids, err := parseIDs(gc.EOS)
	if err != nil {
		return nil, fmt.Errorf("config %s: eos_token_id: %w", safeio.Clean(gpath), err)
	}
	if len(ids) > 0 {
		if err := checkEOS(ids, cfg.VocabSize); err != nil {
			return nil, fmt.Errorf("config %s: %w", safeio.Clean(gpath), err)
		}
		cfg.EOSTokenIDs = ids
	}
	return cfg, nil
}

// checkEOS refuses eos ids outside the vocabulary. Only the first
// maxListedProblems are spelled out, the rest counted: a 16 MiB config can
// list five million bad ids, and a message for each would take gigabytes.
func checkEOS(ids []int, vocab int) error {
	var bad []string
	n := 0
	for _, id := range ids {
		if id < 0 || id >= vocab {
			if n < maxListedProblems {
				bad = append(bad, fmt.Sprintf("eos_token_id %d is outside the vocabulary [0, %d)", id, vocab))
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	msg := strings.Join(bad, "; ")
	if n > len(bad) {
		msg += fmt.Sprintf("; and %d more", n-len(bad))
	}
	return errors.New(msg)
}

// ParseConfig parses a config.json in either form that transformers writes:
// the hub form (model_type qwen3_5, text fields under text_config) or the
// flat text form (model_type qwen3_5_text). The result is validated.
func ParseConfig(data []byte) (*Config, error) {
	top := rawText{raw: data}
	if err := strictDecode(data, &top); err != nil {
		return nil, err
	}
	mt := deref(top.ModelType, "")
	arch := ""
	if len(top.Architectures) > 0 {
		arch = top.Architectures[0]
	}
	fam := familyOf(mt)
	switch {
	case mt == "":
		return nil, fmt.Errorf("model_type is missing (want %s)", modelTypeList())
	case fam == nil:
		return nil, fmt.Errorf("model_type %q is not a Qwen3.5 text model (want %s)", mt, modelTypeList())
	}
	text := &top
	if mt == fam.wrapper {
		if len(top.TextConfig) == 0 || string(top.TextConfig) == "null" {
			return nil, fmt.Errorf("model_type %s needs a text_config object", mt)
		}
		tc := rawText{raw: top.TextConfig}
		if err := strictDecode(top.TextConfig, &tc); err != nil {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		// The hub form keeps tie_word_embeddings and eos at the top level.
		if tc.TieWordEmbeddings == nil || top.TieWordEmbeddings != nil {
			tc.TieWordEmbeddings = top.TieWordEmbeddings
		}
		if len(tc.EOSTokenID) == 0 || string(tc.EOSTokenID) == "null" {
			tc.EOSTokenID = top.EOSTokenID
		}
		text = &tc
	}
	if !fam.sparse && text.NumExperts != nil && *text.NumExperts > 0 {
		return nil, fmt.Errorf("num_experts=%d with model_type %q: the dense Qwen3.5 models have no experts (a mixture-of-experts checkpoint says qwen3_5_moe or qwen3_next)", *text.NumExperts, mt)
	}
	cfg, err := fromRaw(text, fam.sparse)
	if err != nil {
		return nil, err
	}
	cfg.ModelType, cfg.Architecture = mt, arch
	if fam.parse != nil {
		if err := fam.parse(cfg, text); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// fromRaw reads the keys every family shares; sparse says the dense
// intermediate_size may be absent (qwen3_5_moe has none).
func fromRaw(t *rawText, sparse bool) (*Config, error) {
	var missing []string
	need := func(name string, p *int) int {
		if p == nil {
			missing = append(missing, name)
			return 0
		}
		return *p
	}
	c := &Config{
		VocabSize:             need("vocab_size", t.VocabSize),
		HiddenSize:            need("hidden_size", t.HiddenSize),
		IntermediateSize:      deref(t.IntermediateSize, 0),
		NumLayers:             need("num_hidden_layers", t.NumHiddenLayers),
		NumHeads:              need("num_attention_heads", t.NumAttentionHeads),
		NumKVHeads:            need("num_key_value_heads", t.NumKeyValueHeads),
		LinearNumKeyHeads:     need("linear_num_key_heads", t.LinearNumKeyHeads),
		LinearNumValueHeads:   need("linear_num_value_heads", t.LinearNumValueHeads),
		LinearKeyHeadDim:      need("linear_key_head_dim", t.LinearKeyHeadDim),
		LinearValueHeadDim:    need("linear_value_head_dim", t.LinearValueHeadDim),
		LinearConvKernel:      deref(t.LinearConvKernelDim, 4),
		RMSNormEps:            deref(t.RMSNormEps, 1e-6),
		TieWordEmbeddings:     deref(t.TieWordEmbeddings, false),
		MaxPositionEmbeddings: deref(t.MaxPositionEmbeddings, 32768),
	}
	if t.IntermediateSize == nil && !sparse {
		missing = append(missing, "intermediate_size")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing required keys: %s", strings.Join(missing, ", "))
	}
	// Checked before any list is built from it: a tiny config must not
	// make a billion-entry layer list.
	if c.NumLayers <= 0 || c.NumLayers > MaxLayers {
		return nil, fmt.Errorf("num_hidden_layers is %d: want 1 to %d (see docs/limits.md)", c.NumLayers, MaxLayers)
	}
	c.HeadDim = deref(t.HeadDim, 0)
	if c.HeadDim == 0 && c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if act := deref(t.HiddenAct, "silu"); act != "silu" {
		return nil, fmt.Errorf("hidden_act %q is not supported (Qwen3.5 uses silu, which also selects the conv activation)", act)
	}
	if t.AttentionBias != nil && *t.AttentionBias {
		return nil, errors.New("attention_bias=true is not supported (Qwen3.5 projections have no bias)")
	}

	// Layer layout: layer_types wins; else every full_attention_interval-th layer is full.
	switch {
	case t.LayerTypes != nil:
		if len(t.LayerTypes) != c.NumLayers {
			return nil, fmt.Errorf("layer_types has %d entries but num_hidden_layers is %d", len(t.LayerTypes), c.NumLayers)
		}
		for i, s := range t.LayerTypes {
			mk := mixerNamed(s)
			if mk == nil {
				return nil, fmt.Errorf("layer_types[%d] = %q (want %s)", i, s, mixerNames())
			}
			c.LayerTypes = append(c.LayerTypes, mk.kind)
		}
	default:
		every := deref(t.FullAttentionInterval, 4)
		if every <= 0 {
			return nil, fmt.Errorf("full_attention_interval must be positive, got %d", every)
		}
		for i := 0; i < c.NumLayers; i++ {
			if (i+1)%every == 0 {
				c.LayerTypes = append(c.LayerTypes, FullAttention)
			} else {
				c.LayerTypes = append(c.LayerTypes, LinearAttention)
			}
		}
	}

	// RoPE as transformers 5 standardises it: a non-empty legacy
	// rope_scaling replaces rope_parameters whole (beside it or instead of
	// it); then each key from that dict, else the top-level key, else the
	// class default (θ 1e4, factor 0.25).
	rp, src := t.RopeParameters, "rope_parameters"
	if scaling, err := legacyRope(t.RopeScaling); err != nil {
		return nil, err
	} else if scaling != nil {
		rp, src = scaling, "rope_scaling"
	}
	if rp == nil {
		rp = &rawRope{}
	}
	typ := deref(rp.RopeType, deref(rp.Type, "default"))
	if typ != "default" {
		return nil, fmt.Errorf("%s: rope_type %q is not supported (only the default rotary embedding is implemented)", src, typ)
	}
	c.RopeTheta = deref(rp.RopeTheta, deref(t.RopeTheta, 10000))
	c.PartialRotaryFactor = deref(rp.PartialRotaryFactor, deref(t.PartialRotaryFactor, 0.25))
	c.MRopeSection = rp.MRopeSection

	ids, err := parseIDs(t.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("eos_token_id: %w", err)
	}
	c.EOSTokenIDs = ids
	return c, nil
}

// legacyRope reads the legacy rope_scaling dict: nil when absent, null or
// empty (transformers then keeps rope_parameters).
func legacyRope(raw json.RawMessage) (*rawRope, error) {
	var members map[string]json.RawMessage
	if err := strictDecode(raw, &members); len(raw) == 0 || err == nil && len(members) == 0 {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("rope_scaling: %w", err)
	}
	var rp rawRope
	if err := strictDecode(raw, &rp); err != nil {
		return nil, fmt.Errorf("rope_scaling.%w", err)
	}
	return &rp, nil
}

// checkMRope holds mrope_section to what multimodal RoPE can use: three
// non-negative sections (time, height, width) of the rotary dim's r/2
// frequencies, summing to r/2 as every released config's do.
func checkMRope(s []int, rotary int) []string {
	if s == nil {
		return nil
	}
	if len(s) != 3 {
		return []string{fmt.Sprintf("mrope_section has %d entries: want 3 (time, height, width)", len(s))}
	}
	sum := 0
	for i, v := range s {
		if v < 0 || v > rotary/2 {
			return []string{fmt.Sprintf("mrope_section[%d] is %d: want 0 to %d (half the rotary dim)", i, v, rotary/2)}
		}
		sum += v
	}
	if sum != rotary/2 {
		return []string{fmt.Sprintf("mrope_section %v sums to %d: want %d, half the rotary dim head_dim·partial_rotary_factor = %d", s, sum, rotary/2, rotary)}
	}
	return nil
}

// Validate checks that the dimensions are positive and consistent.
func (c *Config) Validate() error {
	var errs []string
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Sprintf("%s must be positive, got %d", name, v))
		}
	}
	pos("vocab_size", c.VocabSize)
	pos("hidden_size", c.HiddenSize)
	// A sparse family with a bad num_experts has no sparse layers; blaming
	// its absent dense width as well would only mislead.
	if c.hasDenseLayers() && !(c.configFamily().sparse && c.MoE.NumExperts <= 0) {
		pos("intermediate_size", c.IntermediateSize)
	}
	errs = append(errs, c.checkMoE()...)
	pos("num_hidden_layers", c.NumLayers)
	pos("num_attention_heads", c.NumHeads)
	pos("num_key_value_heads", c.NumKVHeads)
	pos("head_dim", c.HeadDim)
	pos("linear_num_key_heads", c.LinearNumKeyHeads)
	pos("linear_num_value_heads", c.LinearNumValueHeads)
	pos("linear_key_head_dim", c.LinearKeyHeadDim)
	pos("linear_value_head_dim", c.LinearValueHeadDim)
	pos("linear_conv_kernel_dim", c.LinearConvKernel)
	pos("max_position_embeddings", c.MaxPositionEmbeddings)
	errs = append(errs, c.checkSizes()...)
	if c.LinearNumKeyHeads > 0 && c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
		errs = append(errs, fmt.Sprintf("linear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)", c.LinearNumValueHeads, c.LinearNumKeyHeads))
	}
	if c.NumKVHeads > 0 && c.NumHeads%c.NumKVHeads != 0 {
		errs = append(errs, fmt.Sprintf("num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", c.NumHeads, c.NumKVHeads))
	}
	if !(c.RMSNormEps > 0) {
		errs = append(errs, fmt.Sprintf("rms_norm_eps must be positive, got %g", c.RMSNormEps))
	}
	if !(c.RMSNormEps < 1) {
		errs = append(errs, fmt.Sprintf("rms_norm_eps is %g: an epsilon of 1 or more swamps every norm (the config is wrong)", c.RMSNormEps))
	}
	if !(c.RopeTheta > 1 && c.RopeTheta <= maxRopeTheta) {
		errs = append(errs, fmt.Sprintf("rope_theta is %g: want a RoPE base in (1, %g] (the config is wrong; Qwen3.5 uses 1e7)", c.RopeTheta, maxRopeTheta))
	}
	if !(c.PartialRotaryFactor > 0 && c.PartialRotaryFactor <= 1) {
		errs = append(errs, fmt.Sprintf("partial_rotary_factor must be in (0, 1], got %g", c.PartialRotaryFactor))
	} else if r := c.RotaryDim(); r%2 != 0 || r == 0 {
		errs = append(errs, fmt.Sprintf("rotary dim head_dim·partial_rotary_factor = %d must be even and positive", r))
	} else {
		errs = append(errs, checkMRope(c.MRopeSection, r)...)
	}
	if c.VocabSize > 0 {
		if err := checkEOS(c.EOSTokenIDs, c.VocabSize); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(safeio.List(errs, maxListedProblems))
	}
	return nil
}

func parseIDs(raw json.RawMessage) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		// raw is the file's text: cut and escaped, as any name from an input.
		return nil, fmt.Errorf("want an integer or a list of integers, got %s", safeio.Clean(string(raw)))
	}
	return many, nil
}

// strictDecode decodes JSON with safeio's strict reader: invalid UTF-8,
// duplicate keys, [null] for [0] and wrong types are refused by key path,
// e.g. `hidden_size: want an integer, got JSON string`.
func strictDecode(data []byte, v any) error { return safeio.DecodeJSON(data, v) }

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
