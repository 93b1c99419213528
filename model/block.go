package model

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/tensor"
)

// BlockState is one sequence's cache for one decoder block: the conv and
// recurrent state of a linear-attention block or the KV cache of a
// full-attention one. It is kept apart from the Block's weights so that a
// loaded Model stays read-only and shareable.
type BlockState struct {
	GDN *gateddelta.State // linear attention
	KV  *attention.Cache  // full attention
}

// NewState returns the empty cache for this block (position 0).
func (b *Block) NewState() *BlockState {
	if b.Kind == FullAttention {
		return &BlockState{KV: &attention.Cache{}}
	}
	return &BlockState{GDN: gateddelta.NewState(b.GDN.Dims)}
}

// Reset empties the cache for a new sequence.
func (s *BlockState) Reset() {
	if s.KV != nil {
		s.KV.Reset()
	}
	if s.GDN != nil {
		s.GDN.Reset()
	}
}

// BlockBuffers are the block's [T, H] work areas, reused across blocks and
// calls; the zero value is ready and grows as needed.
type BlockBuffers struct {
	normed, mix []float32
}

func (w *BlockBuffers) grow(n int) (normed, mix []float32) {
	if cap(w.normed) < n {
		w.normed, w.mix = make([]float32, n), make([]float32, n)
	}
	return w.normed[:n], w.mix[:n]
}

// Mix runs the block's token mixer alone: out [T, H] = Mixer(x) for x
// already normalised, continuing the sequence in st.
func (b *Block) Mix(out, x []float32, t int, st *BlockState, be *Backend, rec tensor.Recorder) error {
	if b.Kind == FullAttention {
		return b.Attn.Forward(out, x, t, st.KV, attention.Ops{MatMul: be.MatMul, Core: be.Attn}, rec)
	}
	return b.GDN.Forward(out, x, t, st.GDN, gateddelta.Ops{MatMul: be.MatMul, Conv: be.Conv, Core: be.Delta}, rec)
}

// Forward runs the whole decoder block on x [T, H] in place:
//
//	x ← x + Mixer(RMSNorm₁₊(x; w_in))
//	x ← x + MLP(RMSNorm₁₊(x; w_post))      (the MoE block in a sparse layer)
//
// recording "input", "mixer_in", the mixer's own stages, "mixer_out",
// "mlp_in", "mlp_out" and "output" when rec is set. This is the one
// decoder block: sessions, bench and the trace all run it.
func (b *Block) Forward(x []float32, t int, eps float32, st *BlockState, be *Backend, buf *BlockBuffers, rec tensor.Recorder) error {
	h := len(b.InputNorm)
	if len(x) != t*h {
		return fmt.Errorf("block input has %d values, want T·H = %d·%d", len(x), t, h)
	}
	normed, mix := buf.grow(t * h)
	rec.Record("input", x, t, h)
	if err := norm.RMSNormOnePlus(normed, x, b.InputNorm, eps); err != nil {
		return err
	}
	rec.Record("mixer_in", normed, t, h)
	if err := b.Mix(mix, normed, t, st, be, rec); err != nil {
		return fmt.Errorf("%s mixer: %w", b.Kind, err)
	}
	rec.Record("mixer_out", mix, t, h)
	addInto(x, mix)
	if err := norm.RMSNormOnePlus(normed, x, b.PostNorm, eps); err != nil {
		return err
	}
	rec.Record("mlp_in", normed, t, h)
	if b.MoE != nil {
		if err := b.MoE.Forward(mix, normed, t, be.MoEKernel(), be.MatMul, rec); err != nil {
			return err
		}
	} else if err := b.MLP.Forward(mix, normed, t, be.MatMul); err != nil {
		return err
	}
	rec.Record("mlp_out", mix, t, h)
	addInto(x, mix)
	rec.Record("output", x, t, h)
	return nil
}

// addInto is the residual add x += y, split over the cores when long.
func addInto(x, y []float32) {
	x = x[:len(y)]
	parallel.Rows(len(y), 1, func(lo, hi int) {
		xs := x[lo:hi]
		for i, v := range y[lo:hi] {
			xs[i] += v
		}
	})
}
