package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// Model is a loaded Qwen3.5 text model. Its weights are read-only after
// Load, so one Model may serve many goroutines, each with its own Session.
type Model struct {
	Config    *Config
	Embed     *tensor.Matrix // [V, H]
	LMHead    *tensor.Matrix // [V, H]; the embedding itself when tied
	FinalNorm []float32      // [H], (1+w)
	Blocks    []Block
	// Warnings lists non-fatal findings of Load (e.g. unused tensors).
	Warnings []string

	store     *weights.Store
	streaming bool // drop each layer's mapped pages after use (SetStreaming)
}

// Block is one decoder layer: a token mixer and the SwiGLU MLP, each behind
// a (1+w) RMSNorm with a residual connection (docs/spec.md §3.1).
type Block struct {
	Kind      LayerKind
	InputNorm []float32 // [H]
	PostNorm  []float32 // [H]
	GDN       *gateddelta.Layer
	Attn      *attention.Layer
	MLP       MLP        // the dense MLP (zero in a sparse layer)
	MoE       *moe.Layer // the sparse MoE block instead of MLP, or nil
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
// (without the checkpoint's prefix) and its shape as stored.
type TensorSpec struct {
	Name  string
	Shape []int
}

// ExpectedTensors lists every text tensor the config requires, with its
// shape as stored (nn.Linear [out, in]; conv1d [C, 1, K]). Sparse layers
// list the fused experts tensors (mlp.experts.gate_up_proj [E, 2I, H],
// mlp.experts.down_proj [E, H, I]) as transformers 5.17 defines them.
func (c *Config) ExpectedTensors() []TensorSpec { return c.expectedTensors(nil) }

// expectedTensors is ExpectedTensors with, when perExpert is set and says
// so for a layer, that layer's experts as one tensor per expert.
func (c *Config) expectedTensors(perExpert func(layer int) bool) []TensorSpec {
	h, v, in := c.HiddenSize, c.VocabSize, c.IntermediateSize
	nv, dv := c.LinearNumValueHeads, c.LinearValueHeadDim
	nh, nkv, dh := c.NumHeads, c.NumKVHeads, c.HeadDim
	conv := c.ConvDim()
	ex := []TensorSpec{{"embed_tokens.weight", []int{v, h}}, {"norm.weight", []int{h}}}
	if !c.TieWordEmbeddings {
		ex = append(ex, TensorSpec{"lm_head.weight", []int{v, h}})
	}
	for i, k := range c.LayerTypes {
		p := fmt.Sprintf("layers.%d.", i)
		ex = append(ex,
			TensorSpec{p + "input_layernorm.weight", []int{h}},
			TensorSpec{p + "post_attention_layernorm.weight", []int{h}},
		)
		if c.SparseLayer(i) {
			ex = append(ex, c.moeTensors(p, perExpert != nil && perExpert(i))...)
		} else {
			ex = append(ex,
				TensorSpec{p + "mlp.gate_proj.weight", []int{in, h}},
				TensorSpec{p + "mlp.up_proj.weight", []int{in, h}},
				TensorSpec{p + "mlp.down_proj.weight", []int{h, in}},
			)
		}
		if k == FullAttention {
			a := p + "self_attn."
			ex = append(ex,
				TensorSpec{a + "q_proj.weight", []int{2 * nh * dh, h}},
				TensorSpec{a + "k_proj.weight", []int{nkv * dh, h}},
				TensorSpec{a + "v_proj.weight", []int{nkv * dh, h}},
				TensorSpec{a + "o_proj.weight", []int{h, nh * dh}},
				TensorSpec{a + "q_norm.weight", []int{dh}},
				TensorSpec{a + "k_norm.weight", []int{dh}},
			)
			continue
		}
		g := p + "linear_attn."
		if c.FusedGDNProjections {
			ex = append(ex,
				TensorSpec{g + "in_proj_qkvz.weight", []int{conv + nv*dv, h}},
				TensorSpec{g + "in_proj_ba.weight", []int{2 * nv, h}})
		} else {
			ex = append(ex,
				TensorSpec{g + "in_proj_qkv.weight", []int{conv, h}},
				TensorSpec{g + "in_proj_z.weight", []int{nv * dv, h}},
				TensorSpec{g + "in_proj_b.weight", []int{nv, h}},
				TensorSpec{g + "in_proj_a.weight", []int{nv, h}})
		}
		ex = append(ex,
			TensorSpec{g + "conv1d.weight", []int{conv, 1, c.LinearConvKernel}},
			TensorSpec{g + "dt_bias", []int{nv}},
			TensorSpec{g + "A_log", []int{nv}},
			TensorSpec{g + "norm.weight", []int{dv}},
			TensorSpec{g + "out_proj.weight", []int{h, nv * dv}},
		)
	}
	return ex
}

// supportedDTypes are the storage types qwenref computes from.
var supportedDTypes = []string{"BF16", "F16", "F32"}

// CheckTensors verifies, before any compute, that every tensor the config
// needs is present with a supported dtype and the right shape. It reports
// all problems at once.
func CheckTensors(cfg *Config, st *weights.Store) error {
	var problems []string
	for _, e := range cfg.expectedTensors(storeLayout(st)) {
		info, ok := st.Info(e.Name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: missing (want shape %v)", e.Name, e.Shape))
		case !slices.Contains(supportedDTypes, info.DType):
			problems = append(problems, fmt.Sprintf("%s (in %s): dtype %s is not supported (want BF16, F16 or F32)", e.Name, safeio.Clean(info.File), safeio.Quote(info.DType)))
		case !slices.Equal(info.Shape, e.Shape):
			problems = append(problems, fmt.Sprintf("%s (in %s): shape %v, want %v from the config", e.Name, safeio.Clean(info.File), info.Shape, e.Shape))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("checkpoint does not match its config (%d problems): %s", len(problems), safeio.List(problems, maxListedProblems))
	}
	return nil
}

// Load opens a checkpoint directory (config.json plus safetensors, single or
// sharded) and maps its weights. bf16 weights stay bf16 over the mmap.
func Load(dir string) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	st, err := weights.Open(dir)
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

// FromStore builds a model over an open store; on success the model owns it.
func FromStore(cfg *Config, st *weights.Store) (*Model, error) {
	if err := CheckTensors(cfg, st); err != nil {
		return nil, err
	}
	m, err := build(cfg, storeSource{st})
	if err != nil {
		return nil, err
	}
	m.store = st
	m.adviseExperts()
	if _, ok := st.Info("lm_head.weight"); ok && cfg.TieWordEmbeddings {
		m.Warnings = append(m.Warnings, "tie_word_embeddings is true: lm_head.weight in the checkpoint is ignored")
	}
	m.Warnings = append(m.Warnings, unusedTensors(cfg, st)...)
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
func storeLayout(st *weights.Store) func(int) bool {
	return expertLayout(func(n string) bool { _, ok := st.Info(n); return ok })
}

// build assembles the model from a source whose tensors were checked.
func build(cfg *Config, st tensorSource) (*Model, error) {
	l := loader{st: st}
	m := &Model{Config: cfg}
	m.Embed = l.matrix("embed_tokens.weight")
	m.FinalNorm = l.vector("norm.weight")
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	} else {
		m.LMHead = l.matrix("lm_head.weight")
	}
	eps := float32(cfg.RMSNormEps)
	perExpert := expertLayout(st.Has)
	for i, kind := range cfg.LayerTypes {
		p := fmt.Sprintf("layers.%d.", i)
		b := Block{
			Kind:      kind,
			InputNorm: l.vector(p + "input_layernorm.weight"),
			PostNorm:  l.vector(p + "post_attention_layernorm.weight"),
		}
		if cfg.SparseLayer(i) {
			b.MoE = l.loadMoE(cfg, p, perExpert(i))
		} else {
			b.MLP = MLP{
				Gate: l.matrix(p + "mlp.gate_proj.weight"),
				Up:   l.matrix(p + "mlp.up_proj.weight"),
				Down: l.matrix(p + "mlp.down_proj.weight"),
			}
		}
		if kind == FullAttention {
			a := p + "self_attn."
			b.Attn = &attention.Layer{
				Dims: attention.LayerDims{Hidden: cfg.HiddenSize, NH: cfg.NumHeads, NKV: cfg.NumKVHeads, D: cfg.HeadDim,
					RotaryDim: cfg.RotaryDim(), Theta: cfg.RopeTheta, Eps: eps},
				W: attention.LayerWeights{
					QProj: l.matrix(a + "q_proj.weight"), KProj: l.matrix(a + "k_proj.weight"),
					VProj: l.matrix(a + "v_proj.weight"), OProj: l.matrix(a + "o_proj.weight"),
					QNorm: l.vector(a + "q_norm.weight"), KNorm: l.vector(a + "k_norm.weight"),
				},
			}
		} else {
			g := p + "linear_attn."
			conv := l.vector(g + "conv1d.weight") // [C,1,K] flattens to [C,K]
			b.GDN = &gateddelta.Layer{
				Dims: gateddelta.LayerDims{Hidden: cfg.HiddenSize, NK: cfg.LinearNumKeyHeads, NV: cfg.LinearNumValueHeads,
					DK: cfg.LinearKeyHeadDim, DV: cfg.LinearValueHeadDim, ConvK: cfg.LinearConvKernel, Eps: eps},
				W: gateddelta.LayerWeights{
					OutProj: l.matrix(g + "out_proj.weight"), ConvW: conv,
					ALog: l.vector(g + "A_log"), DtBias: l.vector(g + "dt_bias"), NormW: l.vector(g + "norm.weight"),
				},
			}
			if cfg.FusedGDNProjections {
				l.fusedProjections(cfg, g, &b.GDN.W)
			} else {
				w := &b.GDN.W
				w.InProjQKV, w.InProjZ = l.matrix(g+"in_proj_qkv.weight"), l.matrix(g+"in_proj_z.weight")
				w.InProjB, w.InProjA = l.matrix(g+"in_proj_b.weight"), l.matrix(g+"in_proj_a.weight")
			}
		}
		m.Blocks = append(m.Blocks, b)
	}
	if err := l.err(); err != nil {
		return nil, err
	}
	for i := range m.Blocks {
		if b := m.Blocks[i].MoE; b != nil {
			if err := b.Check(); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
		}
	}
	if err := m.checkSmallTensors(); err != nil {
		return nil, err
	}
	return m, nil
}

// loader collects read errors so that Load reports them together.
type loader struct {
	st   tensorSource
	errs []string
}

func (l *loader) fail(name string, err error) {
	l.errs = append(l.errs, fmt.Sprintf("%s: %v", name, err))
}

func (l *loader) matrix(name string) *tensor.Matrix {
	m, err := l.st.Matrix(name)
	if err != nil {
		l.fail(name, err)
	}
	return m
}

func (l *loader) vector(name string) []float32 {
	v, _, err := l.st.Float32(name)
	if err != nil {
		l.fail(name, err)
	}
	return v
}

func (l *loader) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	return fmt.Errorf("reading weights (%d problems): %s", len(l.errs), safeio.List(l.errs, maxListedProblems))
}

// unusedTensors names text tensors the config does not use, which usually
// means the config and checkpoint disagree about the layout.
func unusedTensors(cfg *Config, st *weights.Store) []string {
	want := map[string]bool{"lm_head.weight": true}
	for _, e := range cfg.expectedTensors(storeLayout(st)) {
		want[e.Name] = true
	}
	var extra []string
	for _, n := range st.Names() {
		if !want[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	shown := extra[:min(len(extra), 5)]
	for i, n := range shown {
		shown[i] = safeio.Quote(n)
	}
	more := ""
	if len(extra) > 5 {
		more = fmt.Sprintf(" and %d more", len(extra)-5)
	}
	return []string{"tensors not used by this config: " + strings.Join(shown, ", ") + more}
}
