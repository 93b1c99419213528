package model

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// Model is a loaded Qwen3.5 text model. Its weights are read-only after
// Load, so one Model may serve many goroutines, each with its own Session.
// The tags name the checkpoint tensors (see family.go).
type Model struct {
	Config    *Config
	Embed     *tensor.Matrix `tensor:"embed_tokens.weight" shape:"V,H" init:"embedding"`
	FinalNorm []float32      `tensor:"norm.weight" shape:"H" init:"zero_centred"` // (1+w)
	// LMHead is the embedding itself when tied.
	LMHead *tensor.Matrix `tensor:"lm_head.weight" shape:"V,H" when:"untied" hub:"top"`
	Blocks []Block        `tensor:"layers.%d."`
	// Warnings lists non-fatal findings of Load (e.g. unused tensors).
	Warnings []string

	store     *weights.Store
	streaming bool // drop each layer's mapped pages after use (SetStreaming)
}

// Block is one decoder layer: a token mixer and the SwiGLU MLP (or the
// sparse MoE block), each behind a (1+w) RMSNorm with a residual
// connection (docs/spec.md §3.1). Mixer is set, and one of MLP and MoE.
type Block struct {
	Kind      LayerKind
	InputNorm []float32  `tensor:"input_layernorm.weight" shape:"H" init:"zero_centred"`
	PostNorm  []float32  `tensor:"post_attention_layernorm.weight" shape:"H" init:"zero_centred"`
	MLP       *MLP       `tensor:"mlp."` // the dense MLP (nil in a sparse layer)
	MoE       *moe.Layer `tensor:"mlp."` // the sparse MoE block instead of MLP, or nil
	// Stored holds the tensors only the model's family stores (Qwen3-Next's
	// fused GDN projections), named in full under the layer's prefix, from
	// which the family derives the shared parts they replace.
	Stored any `tensor:""`
	// Mixer is the token mixer of the layer's Kind, its weights under the
	// mixer's prefix (mixer_gdn.go, mixer_attention.go).
	Mixer Mixer `tensor:""`
	// replaced are the shared fields the stored parts replace (pointers
	// into the block): the walk skips them and the family derives them.
	replaced []any
}

// Close releases the checkpoint's memory maps. The model must not be used
// afterwards.
func (m *Model) Close() error {
	if m.store == nil {
		return nil
	}
	err := m.store.Close()
	m.store = nil
	return err
}

// Files returns the paths of the checkpoint files the model maps (none
// for a model built in memory), so that a command never overwrites them.
func (m *Model) Files() []string {
	if m.store == nil {
		return nil
	}
	return m.store.Files()
}

// TensorSpec is one tensor the config requires: its canonical name
// (without the checkpoint's prefix), its shape as stored, its random-fill
// class and its name in the hub layout.
type TensorSpec struct {
	Name  string
	Shape []int
	Init  string
	Hub   string
}

// ExpectedTensors lists every text tensor the config requires, in
// checkpoint order, with its shape as stored (nn.Linear [out, in]; conv1d
// [C, 1, K]). Sparse layers list the fused experts tensors as transformers
// 5.17 defines them.
func (c *Config) ExpectedTensors() []TensorSpec { return c.expectedTensors(nil) }

// expectedTensors is ExpectedTensors with, when perExpert is set and says
// so for a layer, that layer's experts as one tensor per expert.
func (c *Config) expectedTensors(perExpert func(layer int) bool) []TensorSpec {
	var out []TensorSpec
	_ = walkTensors(skeleton(c, perExpert), func(f weights.Field) error {
		hub := c.configFamily().prefixes.hub + f.Name
		if f.Tag("hub") == "top" {
			hub = f.Name
		}
		out = append(out, TensorSpec{Name: f.Name, Shape: f.Shape, Init: f.Init, Hub: hub})
		return nil
	})
	return out
}

// skeleton is the model's structure without weights: every part the
// config's layers have, with their dims, ready to be walked.
func skeleton(cfg *Config, perExpert func(layer int) bool) *Model {
	m := &Model{Config: cfg, Blocks: make([]Block, len(cfg.LayerTypes))}
	fam := cfg.configFamily()
	for i, kind := range cfg.LayerTypes {
		b := &m.Blocks[i]
		b.Kind = kind
		if cfg.SparseLayer(i) {
			b.MoE = newMoE(cfg, perExpert != nil && perExpert(i))
		} else {
			b.MLP = &MLP{}
		}
		if mk := mixerOf(kind); mk != nil { // build refuses a kind with none
			b.Mixer = mk.build(cfg)
		}
		if fam.stored != nil {
			b.Stored, b.replaced = fam.stored(cfg, b)
		}
	}
	return m
}

// GDNCoreDims are the dims of the config's Gated DeltaNet core over t
// positions (for the core-only benchmarks and vectors).
func (c *Config) GDNCoreDims(t int) gateddelta.Dims {
	return gateddelta.Dims{T: t, NK: c.LinearNumKeyHeads, NV: c.LinearNumValueHeads, DK: c.LinearKeyHeadDim, DV: c.LinearValueHeadDim}
}

// GDNDims are the dims of the config's Gated DeltaNet layers.
func (c *Config) GDNDims() gateddelta.LayerDims {
	return gateddelta.LayerDims{Hidden: c.HiddenSize, NK: c.LinearNumKeyHeads, NV: c.LinearNumValueHeads,
		DK: c.LinearKeyHeadDim, DV: c.LinearValueHeadDim, ConvK: c.LinearConvKernel, Eps: float32(c.RMSNormEps)}
}

// supportedDTypes are the storage types qwenref computes from.
var supportedDTypes = []string{"BF16", "F16", "F32"}

// CheckTensors verifies, before any compute, that every tensor the config
// needs is present with a supported dtype and the right shape. It reports
// all problems at once. Loading makes the same checks in its one walk.
func CheckTensors(cfg *Config, st *weights.Store) error {
	l := loader{store: st, checkOnly: true}
	_ = walkTensors(skeleton(cfg, storeLayout(cfg, st)), l.visit)
	return l.checkErr()
}

// Load opens a checkpoint directory (config.json plus safetensors, single or
// sharded) and maps its weights. bf16 weights stay bf16 over the mmap.
func Load(dir string) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	st, err := openWeights(dir, cfg.configFamily())
	if err != nil {
		return nil, err
	}
	m, err := FromStore(cfg, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return m, nil
}

// FromStore builds a model over an open store (opened with the families'
// names, as Load opens it); on success the model owns it.
func FromStore(cfg *Config, st *weights.Store) (*Model, error) {
	m, seen, err := build(cfg, storeSource{st}, st)
	if err != nil {
		return nil, err
	}
	m.store = st
	m.adviseExperts()
	m.Warnings = append(m.Warnings, unusedTensors(cfg, st, seen)...)
	return m, nil
}

// tensorSource is where build reads named tensors: a checkpoint store or
// a deterministic random generator. Stacked reads a rank-3 tensor
// [A, B, C] (the fused experts) as an [A·B, C] matrix; Has reports a name.
type tensorSource interface {
	Matrix(name string) (*tensor.Matrix, error)
	Float32(name string) ([]float32, []int, error)
	Stacked(name string) (*tensor.Matrix, error)
	Has(name string) bool
}

// storeLayout is expertLayout over a checkpoint's names.
func storeLayout(cfg *Config, st *weights.Store) func(int) bool {
	return expertLayout(cfg, func(n string) bool { _, ok := st.Info(n); return ok })
}

// build assembles the model in one walk of its skeleton: each declared
// tensor is checked against the store (when there is one: present, a
// supported dtype, its shape), bound from the source, and, if a vector,
// scanned for NaN/Inf; the names it saw are returned for unusedTensors.
// The errors come in the order the separate passes gave them: the check's
// problems (nothing is read once one is found), the read errors, the
// family's and the MoE blocks' checks, then the first non-finite vector.
func build(cfg *Config, src tensorSource, st *weights.Store) (*Model, map[string]bool, error) {
	for i, k := range cfg.LayerTypes {
		if mixerOf(k) == nil {
			return nil, nil, fmt.Errorf("layer %d: no token mixer of kind %d", i, int(k))
		}
	}
	m := skeleton(cfg, expertLayout(cfg, src.Has))
	l := loader{src: src, store: st, seen: map[string]bool{}}
	if err := walkTensors(m, l.visit); err != nil {
		return nil, nil, err
	}
	if err := l.checkErr(); err != nil {
		return nil, nil, err
	}
	if err := l.err(); err != nil {
		return nil, nil, err
	}
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
	fam := cfg.configFamily()
	for i := range m.Blocks {
		b := &m.Blocks[i]
		if fam.derive != nil {
			if err := fam.derive(cfg, b); err != nil {
				return nil, nil, fmt.Errorf("layer %d: %s: %w", i, fam.name, err)
			}
		}
		for _, p := range b.replaced {
			if unset(p) {
				return nil, nil, fmt.Errorf("layer %d: family %s stores a part it does not derive (%T left unset)", i, fam.name, p)
			}
		}
		if b.MoE != nil {
			b.MoE.W.BindExperts(b.MoE.Dims)
			if err := b.MoE.Check(); err != nil {
				return nil, nil, fmt.Errorf("layer %d: %w", i, err)
			}
		}
	}
	if l.nonFinite != nil {
		return nil, nil, l.nonFinite
	}
	return m, l.seen, nil
}

// loader is the one walk of Load: it checks, binds and records.
type loader struct {
	src       tensorSource
	store     *weights.Store // the checkpoint's, whose entries are checked; nil for random weights
	checkOnly bool           // check, bind nothing (CheckTensors)
	problems  []string       // the check's
	errs      []string       // the reads'
	nonFinite error          // the first vector with a NaN or Inf
	seen      map[string]bool
}

// visit checks, binds and scans one declared tensor.
func (l *loader) visit(f weights.Field) error {
	if l.seen != nil {
		l.seen[f.Name] = true
	}
	if l.store != nil {
		info, ok := l.store.Info(f.Name)
		switch {
		case !ok:
			l.problems = append(l.problems, fmt.Sprintf("%s: missing (want shape %v)", f.Name, f.Shape))
		case !slices.Contains(supportedDTypes, info.DType):
			l.problems = append(l.problems, fmt.Sprintf("%s (in %s): dtype %s is not supported (want BF16, F16 or F32)", f.Name, safeio.Clean(info.File), safeio.Quote(info.DType)))
		case !slices.Equal(info.Shape, f.Shape):
			l.problems = append(l.problems, fmt.Sprintf("%s (in %s): shape %v, want %v from the config", f.Name, safeio.Clean(info.File), info.Shape, f.Shape))
		}
	}
	if l.checkOnly || len(l.problems) > 0 {
		return nil
	}
	l.bind(f)
	if v := f.Vector(); l.nonFinite == nil {
		if i := firstNonFinite(v); i >= 0 {
			l.nonFinite = fmt.Errorf("weight %s has a non-finite value (%v at index %d)", f.Name, v[i], i)
		}
	}
	return nil
}

func (l *loader) checkErr() error {
	if len(l.problems) > 0 {
		return fmt.Errorf("checkpoint does not match its config (%d problems): %s", len(l.problems), safeio.List(l.problems, maxListedProblems))
	}
	return nil
}

func (l *loader) fail(name string, err error) {
	l.errs = append(l.errs, fmt.Sprintf("%s: %v", name, err))
}

// bind reads one declared tensor: a matrix (a rank-3 tensor as its
// [A·B, C] matrix) or a flat vector.
func (l *loader) bind(f weights.Field) {
	var err error
	switch {
	case f.IsMatrix() && len(f.Shape) == 3:
		var m *tensor.Matrix
		m, err = l.src.Stacked(f.Name)
		f.SetMatrix(m)
	case f.IsMatrix():
		var m *tensor.Matrix
		m, err = l.src.Matrix(f.Name)
		f.SetMatrix(m)
	default:
		var v []float32
		v, _, err = l.src.Float32(f.Name)
		f.SetVector(v)
	}
	if err != nil {
		l.fail(f.Name, err)
	}
}

func (l *loader) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return fmt.Errorf("reading weights (%d problems): %s", len(l.errs), safeio.List(l.errs, maxListedProblems))
}

// unusedTensors names text tensors the config does not use (not in seen,
// the names the load's walk saw), which usually means the config and
// checkpoint disagree about the layout; a tied model's own head tensor is
// named apart.
func unusedTensors(cfg *Config, st *weights.Store, seen map[string]bool) []string {
	var warn []string
	if cfg.TieWordEmbeddings {
		head := untiedHead()
		if _, ok := st.Info(head); ok {
			warn = append(warn, fmt.Sprintf("tie_word_embeddings is true: %s in the checkpoint is ignored", head))
		}
		seen[head] = true
	}
	var extra []string
	for _, n := range st.Names() {
		if !seen[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) == 0 {
		return warn
	}
	shown := extra[:min(len(extra), 5)]
	for i, n := range shown {
		shown[i] = safeio.Quote(n)
	}
	more := ""
	if len(extra) > 5 {
		more = fmt.Sprintf(" and %d more", len(extra)-5)
	}
	return append(warn, "tensors not used by this config: "+strings.Join(shown, ", ")+more)
}

// untiedHead is the canonical name of the head tensor an untied model
// reads (Model.LMHead's tag), which a tied one ignores.
func untiedHead() string {
	f, _ := reflect.TypeFor[Model]().FieldByName("LMHead")
	return f.Tag.Get("tensor")
}

// unset reports whether the field p points to (a matrix or vector) is
// still nil.
func unset(p any) bool {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return true
	}
	switch e := v.Elem(); e.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Interface, reflect.Map:
		return e.IsNil()
	}
	return false
}
