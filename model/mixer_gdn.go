package model

import (
	"fmt"
	"slices"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// GDNMixer is the Gated DeltaNet token mixer of a linear_attention layer,
// its layer stored under linear_attn.
type GDNMixer struct {
	*gateddelta.Layer `tensor:"linear_attn."`
}

func init() {
	registerMixer(&mixerKind{
		kind: LinearAttention, name: "linear_attention", title: "Gated DeltaNet",
		ops: []planOp{{OpGDNInProj, NormNone, 4}, {OpGDNConv, NormNone, 1}, {OpGDNPrep, NormNone, 5},
			{OpGDNCore, NormNone, 2}, {OpGDNNorm, NormNone, 1}, {OpGDNOut, NormNone, 1}},
		build: func(cfg *Config) Mixer {
			if cfg == nil {
				return &GDNMixer{&gateddelta.Layer{}}
			}
			return &GDNMixer{&gateddelta.Layer{Dims: cfg.GDNDims()}}
		},
		params: func(c *Config) int64 {
			h, nv, dv := int64(c.HiddenSize), int64(c.LinearNumValueHeads), int64(c.LinearValueHeadDim)
			conv := int64(c.ConvDim())
			return h*conv + h*nv*dv + 2*h*nv + conv*int64(c.LinearConvKernel) + 2*nv + dv + nv*dv*h
		},
		// InProj's m, z, b and a; Conv's u; Prep's q, k, v, β and g;
		// Core's o; GatedNorm's y.
		bufs: func(c *Config) []int64 {
			nv, hv, conv := int64(c.LinearNumValueHeads), int64(c.LinearNumValueHeads*c.LinearValueHeadDim), int64(c.ConvDim())
			qk := int64(c.LinearNumKeyHeads * c.LinearKeyHeadDim)
			return []int64{conv, hv, nv, nv, conv, qk, qk, hv, nv, nv, hv, hv}
		},
		state: func(c *Config) int64 {
			return int64(c.LinearNumValueHeads)*int64(c.LinearKeyHeadDim)*int64(c.LinearValueHeadDim) +
				int64(c.ConvDim())*int64(c.LinearConvKernel)
		},
		cache: func(*Config) int64 { return 0 },
	})
}

// GDN returns the block's Gated DeltaNet layer, or nil when its mixer is
// another kind.
func (b *Block) GDN() *gateddelta.Layer {
	if m, ok := b.Mixer.(*GDNMixer); ok {
		return m.Layer
	}
	return nil
}

// Kind is LinearAttention.
func (m *GDNMixer) Kind() LayerKind { return LinearAttention }

// Stages are the layer's stages and output path.
func (m *GDNMixer) Stages(t int) ([]tensor.Stage, tensor.StagePath) {
	return m.Dims.Stages(t), m.Dims.OutputPath(t)
}

// NewState is a zero conv and recurrent state.
func (m *GDNMixer) NewState() MixerState { return &gdnState{gateddelta.NewState(m.Dims)} }

// Matrices are the projections.
func (m *GDNMixer) Matrices() []*tensor.Matrix {
	w := &m.W
	return []*tensor.Matrix{w.InProjQKV, w.InProjZ, w.InProjB, w.InProjA, w.OutProj}
}

func (m *GDNMixer) step(op PlanOp, w *mixerWork, in, out []float32, t int, segs []int, st MixerState, be *Backend, rec tensor.Recorder) error {
	ops := gateddelta.Ops{MatMul: packedMatMul(be.MatMul, segs, t), Conv: be.Conv, Core: be.Delta}
	packed := len(segs) > 1
	s, ok := st.(*gdnState)
	if !ok {
		return fmt.Errorf("a %T state for a Gated DeltaNet layer", st)
	}
	if op == OpGDNInProj {
		w.release()
		w.w = m.NewWork(t, rec == nil)
	}
	gw, ok := w.w.(*gateddelta.Work)
	if !ok {
		return fmt.Errorf("plan: %s before %s", op, OpGDNInProj)
	}
	switch op {
	case OpGDNInProj:
		return m.InProj(gw, in, ops, rec)
	case OpGDNConv:
		if packed {
			return m.ConvSegments(gw, s.State, ops, segs, rec)
		}
		return m.Conv(gw, s.State, ops, rec)
	case OpGDNPrep:
		return m.Prep(gw, rec)
	case OpGDNCore:
		if packed {
			return m.CoreSegments(gw, s.State, ops, segs, rec)
		}
		return m.Core(gw, s.State, ops, rec)
	case OpGDNNorm:
		return m.GatedNorm(gw, rec)
	case OpGDNOut:
		return m.OutProj(out, gw, ops)
	}
	return fmt.Errorf("plan: %s is not a Gated DeltaNet op", op)
}

// gdnState is the conv and recurrent state; both fold every token in, so
// a snapshot copies them.
type gdnState struct{ *gateddelta.State }

func (s *gdnState) save() mixerSave {
	return &gdnSave{conv: slices.Clone(s.Conv), s: slices.Clone(s.S)}
}

type gdnSave struct{ conv, s []float32 }

func (v *gdnSave) restore(st MixerState) {
	s := st.(*gdnState)
	copy(s.Conv, v.conv)
	copy(s.S, v.s)
}

func (v *gdnSave) bytes() int64 { return 4 * int64(len(v.conv)+len(v.s)) }
