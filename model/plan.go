package model

import "fmt"

// PlanOp is one op of the block plan: a unit of the decoder that a device
// backend runs as it has it, in a prefill form over T rows and a decode
// form over one. The values are the QR_OP_* of the CUDA library's C ABI.
type PlanOp int32

// The ops, in the order of the C ABI. x is the residual stream, x̂ the
// normed rows a mixer or MLP reads.
const (
	OpEmbed      PlanOp = iota // x = E[ids]
	OpNorm                     // x̂ = RMSNorm₁₊(x; w), w from PlanStep.Norm
	OpRecord                   // nothing computed: a trace records x
	OpGDNInProj                // [qkv | z | b | a] = x̂ W_inᵀ
	OpGDNConv                  // causal depthwise conv + SiLU over qkv
	OpGDNPrep                  // gates g, β; q̂, k̂ L2-normed (decode: fused into OpGDNCore)
	OpGDNCore                  // the gated delta rule over the recurrent state
	OpGDNNorm                  // gated RMSNorm: w ⊙ norm(o) · SiLU(z)
	OpGDNOut                   // x += y W_outᵀ
	OpAttnQKV                  // [q | gate, k, v] = x̂ W_qkvᵀ
	OpAttnPrep                 // q, k RMSNorm and rotary; k, v into the cache
	OpAttnCore                 // causal attention over the cache, times σ(gate)
	OpAttnOut                  // x += o W_oᵀ
	OpMLPGateUp                // a = SiLU(x̂ W_gᵀ) ⊙ x̂ W_uᵀ
	OpMLPDown                  // x += a W_downᵀ
	OpMoERoute                 // router softmax, top-k, renormalised weights
	OpMoEExperts               // the chosen experts' SwiGLU MLPs
	OpMoEShared                // the shared expert
	OpMoECombine               // x += Σ weighted experts + σ(gate)·shared
	OpLMHead                   // logits = x̂ W_headᵀ
	planOpCount
)

// planOpNames are the QR_OP_* names, lower case and without the prefix.
var planOpNames = [planOpCount]string{"embed", "norm", "record", "gdn_in_proj", "gdn_conv", "gdn_prep", "gdn_core",
	"gdn_norm", "gdn_out", "att_qkv", "att_prep", "att_core", "att_out", "mlp_gate_up", "mlp_down", "moe_route",
	"moe_experts", "moe_shared", "moe_combine", "lm_head"}

func (o PlanOp) String() string {
	if o >= 0 && o < planOpCount {
		return planOpNames[o]
	}
	return fmt.Sprintf("PlanOp(%d)", int32(o))
}

// NormWeight names the RMSNorm weight of an OpNorm step.
type NormWeight int

// The norm weights: a block's two, and the model's final one.
const (
	NormNone NormWeight = iota
	NormInput
	NormPost
	NormFinal
)

// PlanStep is one step of the plan: an op on a layer (-1 for the model's
// own embedding, final norm and head), and the stages its outputs are
// recorded as, in the op's output order, under the names Model.Stages
// gives them ("layers.3.qkv_proj").
type PlanStep struct {
	Op     PlanOp
	Layer  int
	Norm   NormWeight
	Stages []string
}

// The stage names of the model's own steps, written once for the CPU
// forward, its stage list and the plan.
const (
	stageEmbeddings = "embeddings"
	stageFinalNorm  = "final_norm"
	stageLogits     = "logits"
)

// planOp is an op of a block and how many of the block's stages, taken in
// Block.Stages order, it records.
type planOp struct {
	op      PlanOp
	norm    NormWeight
	records int
}

// blockOps is the decoder block (Block.Forward) as ops:
//
//	x ← x + Mixer(RMSNorm₁₊(x; w_in))
//	x ← x + MLP(RMSNorm₁₊(x; w_post))
//
// with the mixer's ops as its kind lists them (mixer_*.go) and the MLP
// dense or the sparse MoE block. The residual adds are the mixer's and MLP's last
// ops (x += …), so each records its product before the add.
func blockOps(kind LayerKind, sparse bool) []planOp {
	ops := []planOp{{OpRecord, NormNone, 1}, {OpNorm, NormInput, 1}} // input, mixer_in
	ops = append(ops, mixerOf(kind).ops...)
	ops = append(ops, planOp{OpNorm, NormPost, 1}) // mlp_in
	if sparse {
		ops = append(ops, planOp{OpMoERoute, NormNone, 3}, planOp{OpMoEExperts, NormNone, 0},
			planOp{OpMoEShared, NormNone, 0}, planOp{OpMoECombine, NormNone, 4})
	} else {
		ops = append(ops, planOp{OpMLPGateUp, NormNone, 0}, planOp{OpMLPDown, NormNone, 1})
	}
	return append(ops, planOp{OpRecord, NormNone, 1}) // output
}

// Plan is cfg's decoder as an ordered list of steps: the embedding, each
// layer's block (its mixer and MLP as the family's config makes them), the
// final norm and the head. The device backends execute it, and the CPU
// block walks the same steps (Block.Forward); the stage names it carries
// are the ones the CPU forward records (Model.Stages), so a device trace
// compares with the CPU's stage by stage.
func Plan(cfg *Config) ([]PlanStep, error) {
	if cfg == nil || len(cfg.LayerTypes) != cfg.NumLayers {
		return nil, fmt.Errorf("plan: config without its %d layer types", cfgLayers(cfg))
	}
	steps := []PlanStep{{Op: OpEmbed, Layer: -1, Stages: []string{stageEmbeddings}}}
	for li, kind := range cfg.LayerTypes {
		block, err := blockPlan(kind, cfg.SparseLayer(li), li, fmt.Sprintf("layers.%d.", li))
		if err != nil {
			return nil, err
		}
		steps = append(steps, block...)
	}
	return append(steps,
		PlanStep{Op: OpNorm, Layer: -1, Norm: NormFinal, Stages: []string{stageFinalNorm}},
		PlanStep{Op: OpLMHead, Layer: -1}), nil
}

// blockPlan is one block's steps on layer li, its stage names (in
// Block.Stages order) under prefix.
func blockPlan(kind LayerKind, sparse bool, li int, prefix string) ([]PlanStep, error) {
	if mixerOf(kind) == nil {
		return nil, fmt.Errorf("plan: layer %d: no token mixer of kind %d", li, int(kind))
	}
	names := StageNames(kind, sparse)
	ops := blockOps(kind, sparse)
	steps := make([]PlanStep, 0, len(ops))
	next := 0
	for _, o := range ops {
		if next+o.records > len(names) {
			return nil, fmt.Errorf("plan: layer %d: %s wants %d more stages than the block's %d", li, o.op,
				next+o.records-len(names), len(names))
		}
		st := make([]string, o.records)
		for i := range st {
			st[i] = prefix + names[next+i]
		}
		next += o.records
		steps = append(steps, PlanStep{Op: o.op, Layer: li, Norm: o.norm, Stages: st})
	}
	if next != len(names) {
		return nil, fmt.Errorf("plan: layer %d: its ops record %d of the block's %d stages", li, next, len(names))
	}
	return steps, nil
}

func cfgLayers(cfg *Config) int {
	if cfg == nil {
		return 0
	}
	return cfg.NumLayers
}
