package model

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/tensor"
)

// AttentionMixer is the gated softmax-attention token mixer of a
// full_attention layer, its layer stored under self_attn.
type AttentionMixer struct {
	*attention.Layer `tensor:"self_attn."`
}

func init() {
	registerMixer(&mixerKind{
		kind: FullAttention, name: "full_attention", title: "attention",
		ops: []planOp{{OpAttnQKV, NormNone, 3}, {OpAttnPrep, NormNone, 2}, {OpAttnCore, NormNone, 2},
			{OpAttnOut, NormNone, 1}},
		build: func(cfg *Config) Mixer {
			if cfg == nil {
				return &AttentionMixer{&attention.Layer{}}
			}
			return &AttentionMixer{&attention.Layer{Dims: attention.LayerDims{Hidden: cfg.HiddenSize,
				NH: cfg.NumHeads, NKV: cfg.NumKVHeads, D: cfg.HeadDim, RotaryDim: cfg.RotaryDim(),
				Theta: cfg.RopeTheta, Eps: float32(cfg.RMSNormEps)}}}
		},
		params: func(c *Config) int64 {
			h, nh, nkv, dh := int64(c.HiddenSize), int64(c.NumHeads), int64(c.NumKVHeads), int64(c.HeadDim)
			return h*2*nh*dh + 2*h*nkv*dh + nh*dh*h + 2*dh
		},
		// QKV's q|gate, k and v; Prep's q and gate; Core's output.
		bufs: func(c *Config) []int64 {
			q, kv := int64(c.NumHeads*c.HeadDim), int64(c.NumKVHeads*c.HeadDim)
			return []int64{2 * q, kv, kv, q, q, q}
		},
		state: func(*Config) int64 { return 0 },
		cache: func(c *Config) int64 { return 2 * int64(c.NumKVHeads*c.HeadDim) },
	})
}

// Attn returns the block's attention layer, or nil when its mixer is
// another kind.
func (b *Block) Attn() *attention.Layer {
	if m, ok := b.Mixer.(*AttentionMixer); ok {
		return m.Layer
	}
	return nil
}

// Kind is FullAttention.
func (m *AttentionMixer) Kind() LayerKind { return FullAttention }

// Stages are the layer's stages and output path.
func (m *AttentionMixer) Stages(t int) ([]tensor.Stage, tensor.StagePath) {
	return m.Dims.Stages(t), m.Dims.OutputPath(t)
}

// NewState is an empty KV cache.
func (m *AttentionMixer) NewState() MixerState { return &kvState{&attention.Cache{}} }

// Matrices are the projections.
func (m *AttentionMixer) Matrices() []*tensor.Matrix {
	w := &m.W
	return []*tensor.Matrix{w.QProj, w.KProj, w.VProj, w.OProj}
}

func (m *AttentionMixer) step(op PlanOp, w *mixerWork, in, out []float32, t int, segs []int, st MixerState, be *Backend, rec tensor.Recorder) error {
	ops := attention.Ops{MatMul: packedMatMul(be.MatMul, segs, t), Core: be.Attn}
	packed := len(segs) > 1
	s, ok := st.(*kvState)
	if !ok {
		return fmt.Errorf("a %T state for an attention layer", st)
	}
	if op == OpAttnQKV {
		w.release()
		w.w = m.NewWork(t, rec == nil)
	}
	aw, ok := w.w.(*attention.Work)
	if !ok {
		return fmt.Errorf("plan: %s before %s", op, OpAttnQKV)
	}
	switch op {
	case OpAttnQKV:
		return m.QKV(aw, in, ops, rec)
	case OpAttnPrep:
		if packed {
			return m.PrepSegments(aw, segs, rec)
		}
		return m.Prep(aw, s.Len, rec)
	case OpAttnCore:
		if packed {
			return m.CoreSegments(aw, s.Cache, ops, segs, rec)
		}
		return m.Core(aw, s.Cache, ops, rec)
	case OpAttnOut:
		return m.OutProj(out, aw, ops)
	}
	return fmt.Errorf("plan: %s is not an attention op", op)
}

// kvState is the KV cache; it only grows, so a snapshot keeps its length.
type kvState struct{ *attention.Cache }

func (s *kvState) save() mixerSave { return &kvSave{k: len(s.K), v: len(s.V), n: s.Len} }

type kvSave struct{ k, v, n int }

func (v *kvSave) restore(st MixerState) {
	s := st.(*kvState)
	s.K, s.V, s.Len = s.K[:v.k], s.V[:v.v], v.n
}

func (v *kvSave) bytes() int64 { return 0 }
