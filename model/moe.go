package model

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// MaxExperts bounds num_experts (Qwen3-Next has 512, the 35B-A3B 256);
// MaxTotalExperts bounds num_experts × sparse layers, the number of expert
// matrices Load makes (Qwen3-Next-80B: 24,576), so that a small file with
// tiny experts cannot make it allocate millions of them.
const (
	MaxExperts      = 1 << 16
	MaxTotalExperts = 1 << 18
)

// MoEConfig holds the mixture-of-experts keys of a qwen3_5_moe or
// qwen3_next config (docs/moe.md). NumExperts is 0 for the dense models.
type MoEConfig struct {
	NumExperts         int   // E, num_experts
	NumExpertsPerTok   int   // k, num_experts_per_tok
	IntermediateSize   int   // moe_intermediate_size, each routed expert's width
	SharedIntermediate int   // shared_expert_intermediate_size
	NormTopKProb       bool  // renormalise the chosen k probabilities
	DecoderSparseStep  int   // layer i is sparse when (i+1) % step == 0 (qwen3_next)
	MLPOnlyLayers      []int // layers that keep the dense MLP (qwen3_next)
	SparseEveryLayer   bool  // qwen3_5_moe: every layer is sparse (the step and list are not read)
}

// IsMoE reports whether the config has sparse layers.
func (c *Config) IsMoE() bool { return c.MoE.NumExperts > 0 }

// SparseLayer reports whether layer i runs the MoE block instead of the
// dense MLP: every layer in qwen3_5_moe; in qwen3_next, layers not in
// mlp_only_layers with (i+1) % decoder_sparse_step == 0.
func (c *Config) SparseLayer(i int) bool {
	m := c.MoE
	switch {
	case m.NumExperts <= 0:
		return false
	case m.SparseEveryLayer:
		return true
	case slices.Contains(m.MLPOnlyLayers, i):
		return false
	}
	return m.DecoderSparseStep > 0 && (i+1)%m.DecoderSparseStep == 0
}

// SparseLayers counts the layers that run the MoE block.
func (c *Config) SparseLayers() int {
	n := 0
	for i := range c.LayerTypes {
		if c.SparseLayer(i) {
			n++
		}
	}
	return n
}

func (c *Config) hasDenseLayers() bool { return c.SparseLayers() < len(c.LayerTypes) }

// parseMoE reads the MoE keys both sparse families share.
func (c *Config) parseMoE(t *rawText) error {
	var missing []string
	need := func(name string, p *int) int {
		if p == nil {
			missing = append(missing, name)
			return 0
		}
		return *p
	}
	c.MoE = MoEConfig{
		NumExperts:         need("num_experts", t.NumExperts),
		NumExpertsPerTok:   need("num_experts_per_tok", t.NumExpertsPerTok),
		IntermediateSize:   need("moe_intermediate_size", t.MoEIntermediateSize),
		SharedIntermediate: need("shared_expert_intermediate_size", t.SharedExpertInterSize),
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing required keys: %s", strings.Join(missing, ", "))
	}
	return nil
}

// checkMoE validates the MoE keys (called by Validate).
func (c *Config) checkMoE() []string {
	m := c.MoE
	if m.NumExperts == 0 && !c.configFamily().sparse {
		return nil
	}
	var errs []string
	switch {
	case m.NumExperts <= 0 || m.NumExperts > MaxExperts:
		errs = append(errs, fmt.Sprintf("num_experts is %d: want 1 to %d", m.NumExperts, MaxExperts))
	case m.NumExpertsPerTok <= 0 || m.NumExpertsPerTok > m.NumExperts:
		errs = append(errs, fmt.Sprintf("num_experts_per_tok is %d: want 1 to num_experts (%d)", m.NumExpertsPerTok, m.NumExperts))
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"moe_intermediate_size", m.IntermediateSize}, {"shared_expert_intermediate_size", m.SharedIntermediate}} {
		if d.v <= 0 || d.v > MaxDim {
			errs = append(errs, fmt.Sprintf("%s is %d: want 1 to %d", d.name, d.v, MaxDim))
		}
	}
	if m.DecoderSparseStep <= 0 {
		errs = append(errs, fmt.Sprintf("decoder_sparse_step is %d: want a positive step", m.DecoderSparseStep))
	}
	for _, l := range m.MLPOnlyLayers {
		if l < 0 || l >= c.NumLayers {
			errs = append(errs, fmt.Sprintf("mlp_only_layers names layer %d, outside [0, %d)", l, c.NumLayers))
			break
		}
	}
	if len(errs) == 0 {
		if n := int64(m.NumExperts) * int64(c.SparseLayers()); n > MaxTotalExperts {
			errs = append(errs, fmt.Sprintf("num_experts × sparse layers is %d: over the limit of %d (see docs/moe.md)", n, MaxTotalExperts))
		}
	}
	if len(errs) == 0 && c.HiddenSize > 0 && c.HiddenSize <= MaxDim {
		if _, ok := mulCap(MaxTensorElems, m.NumExperts, 2, m.IntermediateSize, c.HiddenSize); !ok {
			errs = append(errs, fmt.Sprintf("mlp.experts.gate_up_proj [num_experts, 2·moe_intermediate_size, hidden_size] has more than %d elements (see docs/moe.md)", int64(MaxTensorElems)))
		}
	}
	return errs
}

// moeLayerParams counts one sparse block's parameters (all experts, or the
// k active ones), saturating above MaxParams so that TextParams cannot
// overflow before Validate reports the size.
func (c *Config) moeLayerParams(activeOnly bool) int64 {
	m := c.MoE
	e := m.NumExperts
	if activeOnly {
		e = m.NumExpertsPerTok
	}
	h := c.HiddenSize
	experts, ok1 := mulCap(MaxParams, e, 3, m.IntermediateSize, h)
	shared, ok2 := mulCap(MaxParams, 3, m.SharedIntermediate, h)
	router, ok3 := mulCap(MaxParams, m.NumExperts+1, h) // the router and the shared expert's gate
	if !ok1 || !ok2 || !ok3 {
		return MaxParams + 1
	}
	return experts + shared + router
}

// ActiveTextParams counts the parameters one token computes with: every
// dense weight plus, in each sparse layer, the router, the shared expert
// and k of the E routed experts (the "A3B" of 35B-A3B).
func (c *Config) ActiveTextParams() int64 {
	total := c.TextParams()
	for i := range c.LayerTypes {
		if c.SparseLayer(i) {
			total -= c.moeLayerParams(false) - c.moeLayerParams(true)
		}
	}
	return total
}

// newMoE is a sparse block's skeleton: its dims, and the stored layout
// of its experts (fused, or one tensor per expert).
func newMoE(cfg *Config, perExpert bool) *moe.Layer {
	m := cfg.MoE
	l := &moe.Layer{Dims: moe.Dims{Hidden: cfg.HiddenSize, Experts: m.NumExperts, TopK: m.NumExpertsPerTok,
		Inter: m.IntermediateSize, SharedInter: m.SharedIntermediate, NormTopK: m.NormTopKProb}}
	if perExpert {
		l.W.PerExpert = make([]moe.ExpertWeights, m.NumExperts)
	} else {
		l.W.Fused = &moe.FusedExperts{}
	}
	return l
}

// expertLayout says, per sparse layer, whether a store holds one tensor
// per expert (the first expert's first tensor present, the fused tensor
// absent). Transformers 5.17 defines the fused layout; Qwen3-Next's hub
// files and older conversions store one tensor per expert.
func expertLayout(cfg *Config, has func(string) bool) func(layer int) bool {
	return func(layer int) bool {
		fused := partNames(cfg, layer, &moe.Weights{Fused: &moe.FusedExperts{}})
		per := partNames(cfg, layer, &moe.Weights{PerExpert: make([]moe.ExpertWeights, 1)})
		return !has(firstNotIn(fused, per)) && has(firstNotIn(per, fused))
	}
}

// partNames lists the names of a sparse block's tensors in layer i as the
// walker gives them (the prefixes read from the Model and Block tags).
func partNames(cfg *Config, i int, w *moe.Weights) []string {
	var out []string
	prefix := fmt.Sprintf(fieldTag[Model]("Blocks"), i) + fieldTag[Block]("MoE")
	_ = weights.Walk(w, prefix, cfg.Sizes(), func(f weights.Field) error {
		out = append(out, f.Name)
		return nil
	})
	return out
}

// firstNotIn is the first of names that others lacks.
func firstNotIn(names, others []string) string {
	for _, n := range names {
		if !slices.Contains(others, n) {
			return n
		}
	}
	return ""
}

// fieldTag is the tensor tag of a struct field.
func fieldTag[T any](field string) string {
	f, _ := reflect.TypeFor[T]().FieldByName(field)
	return f.Tag.Get("tensor")
}

// Stacked serves a rank-3 random tensor as an [A·B, C] matrix.
func (r *randomSource) Stacked(name string) (*tensor.Matrix, error) {
	s, err := r.shape(name)
	if err != nil {
		return nil, err
	}
	if len(s) != 3 {
		return nil, fmt.Errorf("%s has shape %v, not [A, B, C]", name, s)
	}
	flat := []int{s[0] * s[1], s[2]}
	v := r.values(name, s)
	if r.bf16 {
		b := make([]uint16, len(v))
		for i, x := range v {
			b[i] = tensor.Float32ToBF16(x)
		}
		return tensor.NewMatrixBF16(flat[0], flat[1], b)
	}
	return tensor.NewMatrixF32(flat[0], flat[1], v)
}

// storeSource is a checkpoint store as a tensorSource.
type storeSource struct{ *weights.Store }

// Has reports whether the checkpoint holds the canonical name.
func (s storeSource) Has(name string) bool { _, ok := s.Info(name); return ok }

// Has reports whether the random model has the tensor.
func (r *randomSource) Has(name string) bool { _, ok := r.specs[name]; return ok }

// moeMatrices lists a sparse block's weight matrices (expert views
// included, so page drops and byte counts cover them).
func (b *Block) moeMatrices() []*tensor.Matrix {
	if b.MoE == nil {
		return nil
	}
	w := &b.MoE.W
	out := []*tensor.Matrix{w.Router, w.SharedGate, w.SharedUp, w.SharedDown, w.SharedProb}
	for e := range w.Gate {
		out = append(out, w.Gate[e], w.Up[e], w.Down[e])
	}
	return out
}

// MoEKernel is the backend's MoE kernel, moe.Grouped when it names none
// (backends registered before the MoE part existed).
func (be *Backend) MoEKernel() moe.Kernel {
	if be.MoE == nil {
		return moe.Grouped{}
	}
	return be.MoE
}

// adviseExperts makes the mapped experts of every sparse layer read only
// what a token uses: no read-around on faults (a page fault on a 2 MiB
// expert would otherwise read the several MiB of read-ahead window around
// it, mostly unused neighbours), and the routed experts prefetched in bulk
// as soon as the router has chosen them. Hints only: results never change.
func (m *Model) adviseExperts() {
	st := m.store
	for i := range m.Blocks {
		b := m.Blocks[i].MoE
		if b == nil {
			continue
		}
		w := &b.W
		for e := range w.Gate {
			for _, x := range []*tensor.Matrix{w.Gate[e], w.Up[e], w.Down[e]} {
				_ = st.ReadRandom(x)
			}
		}
		b.Prefetch = func(e int) {
			for _, x := range []*tensor.Matrix{w.Gate[e], w.Up[e], w.Down[e]} {
				_ = st.Prefetch(x)
			}
		}
	}
}

// moeWorkingSet is a sparse block's live float32 buffers per token (for
// EstimateMemory): router logits, the grouped kernel's gathered input and
// output rows and gate/up blocks for k experts, the shared expert's
// gate/up and output, and the block's output.
func (c *Config) moeWorkingSet() int64 {
	m := c.MoE
	if m.NumExperts == 0 {
		return 0
	}
	h, k := int64(c.HiddenSize), int64(m.NumExpertsPerTok)
	return int64(m.NumExperts) + 2*k + k*(2*h+2*int64(m.IntermediateSize)) + 2*int64(m.SharedIntermediate) + 2*h
}
