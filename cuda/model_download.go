package cuda

// The device model's weights copied back to the host.

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// Download copies the device weights back into a host model.Model (bf16
// matrices, float32 vectors): GPU-generated weights can then run on a CPU
// backend. It needs host memory for the whole model, and a bf16 model.
func (m *residentModel) Download() (*model.Model, error) {
	if m.f32 {
		return nil, fmt.Errorf("cuda: Download reads the bf16 model's matrices; this is the fp32 model")
	}
	cfg := m.cfg
	h, v, in := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	var first error
	get := func(layer, which int, f func() int) {
		if first != nil {
			return
		}
		first = m.dev.call(fmt.Sprintf("model_get %d/%d", layer, which), f)
	}
	// into fills dst (rows·cols values at its offset) with one tensor.
	into := func(layer, which, expert int, dst []uint16) {
		get(layer, which, func() int { return cModelGetBF16(m.h, layer, which, expert, dst) })
	}
	mat := func(layer, which, rows, cols int) *tensor.Matrix {
		b := make([]uint16, rows*cols)
		into(layer, which, 0, b)
		return &tensor.Matrix{Rows: rows, Cols: cols, BF16: b}
	}
	vec := func(layer, which, n int) []float32 {
		x := make([]float32, n)
		get(layer, which, func() int { return cModelGetF32(m.h, layer, which, 0, x) })
		return x
	}
	hm := &model.Model{Config: cfg, Embed: mat(0, wEmbed, v, h), LMHead: mat(0, wLMHead, v, h),
		FinalNorm: vec(0, wFinalNorm, h)}
	eps := float32(cfg.RMSNormEps)
	for l, kind := range cfg.LayerTypes {
		b := model.Block{Kind: kind, InputNorm: vec(l, wInputNorm, h), PostNorm: vec(l, wPostNorm, h)}
		if cfg.SparseLayer(l) {
			b.MoE = m.downloadMoE(l, into, mat)
		} else {
			b.MLP = &model.MLP{Gate: mat(l, wMLPGate, in, h), Up: mat(l, wMLPUp, in, h), Down: mat(l, wMLPDown, h, in)}
		}
		if kind == model.FullAttention {
			nh, nkv, dh := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
			b.Mixer = &model.AttentionMixer{Layer: &attention.Layer{
				Dims: attention.LayerDims{Hidden: h, NH: nh, NKV: nkv, D: dh, RotaryDim: cfg.RotaryDim(),
					Theta: cfg.RopeTheta, Eps: eps},
				W: attention.LayerWeights{QProj: mat(l, wAttQ, 2*nh*dh, h), KProj: mat(l, wAttK, nkv*dh, h),
					VProj: mat(l, wAttV, nkv*dh, h), OProj: mat(l, wAttO, h, nh*dh), QNorm: vec(l, wAttQNorm, dh),
					KNorm: vec(l, wAttKNorm, dh)},
			}}
		} else {
			gd := gateddelta.LayerDims{Hidden: h, NK: cfg.LinearNumKeyHeads, NV: cfg.LinearNumValueHeads,
				DK: cfg.LinearKeyHeadDim, DV: cfg.LinearValueHeadDim, ConvK: cfg.LinearConvKernel, Eps: eps}
			c, hv := gd.ConvDim(), gd.NV*gd.DV
			b.Mixer = &model.GDNMixer{Layer: &gateddelta.Layer{Dims: gd, W: gateddelta.LayerWeights{
				InProjQKV: mat(l, wGDNQKV, c, h), InProjZ: mat(l, wGDNZ, hv, h), InProjB: mat(l, wGDNB, gd.NV, h),
				InProjA: mat(l, wGDNA, gd.NV, h), OutProj: mat(l, wGDNOut, h, hv),
				ConvW: vec(l, wGDNConv, c*gd.ConvK), ALog: vec(l, wGDNALog, gd.NV), DtBias: vec(l, wGDNDtBias, gd.NV),
				NormW: vec(l, wGDNNorm, gd.DV)}}}
		}
		hm.Blocks = append(hm.Blocks, b)
	}
	if first != nil {
		return nil, first
	}
	return hm, nil
}

// downloadMoE reads sparse layer l back in transformers' fused expert
// layout (gate_up [E·2I, H], down [E·H, I]).
func (m *residentModel) downloadMoE(l int, into func(layer, which, expert int, dst []uint16),
	mat func(layer, which, rows, cols int) *tensor.Matrix) *moe.Layer {
	mc := m.cfg.MoE
	h, e, in, is := m.cfg.HiddenSize, mc.NumExperts, mc.IntermediateSize, mc.SharedIntermediate
	x := &moe.Layer{Dims: moe.Dims{Hidden: h, Experts: e, TopK: mc.NumExpertsPerTok, Inter: in, SharedInter: is,
		NormTopK: mc.NormTopKProb}}
	gu := &tensor.Matrix{Rows: e * 2 * in, Cols: h, BF16: make([]uint16, e*2*in*h)}
	down := &tensor.Matrix{Rows: e * h, Cols: in, BF16: make([]uint16, e*h*in)}
	for ex := range e {
		into(l, wMoEGate, ex, gu.BF16[ex*2*in*h:(ex*2+1)*in*h])
		into(l, wMoEUp, ex, gu.BF16[(ex*2+1)*in*h:(ex+1)*2*in*h])
		into(l, wMoEDown, ex, down.BF16[ex*h*in:(ex+1)*h*in])
	}
	x.W = moe.Weights{Router: mat(l, wMoERouter, e, h), SharedProb: mat(l, wMoESharedProb, 1, h),
		SharedGate: mat(l, wMoESharedGate, is, h), SharedUp: mat(l, wMoESharedUp, is, h),
		SharedDown: mat(l, wMoESharedDown, h, is), Fused: &moe.FusedExperts{GateUp: gu, Down: down}}
	x.W.BindExperts(x.Dims)
	return x
}
