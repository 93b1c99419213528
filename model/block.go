package model

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/tensor"
)

// BlockState is one sequence's cache for one decoder block: its mixer's
// state (the conv and recurrent state of a Gated DeltaNet block, the KV
// cache of an attention one). It is kept apart from the Block's weights so
// that a loaded Model stays read-only and shareable.
type BlockState struct {
	Mixer MixerState
}

// NewState returns the empty cache for this block (position 0).
func (b *Block) NewState() *BlockState { return &BlockState{Mixer: b.Mixer.NewState()} }

// Reset empties the cache for a new sequence.
func (s *BlockState) Reset() { s.Mixer.Reset() }

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
// already normalised, continuing the sequence in st: the mixer's steps of
// the block plan, without the residual add.
func (b *Block) Mix(out, x []float32, t int, st *BlockState, be *Backend, rec tensor.Recorder) error {
	steps, err := blockPlan(b.Mixer.Kind(), b.MoE != nil, -1, "")
	if err != nil {
		return err
	}
	var w blockWork
	defer w.release()
	for _, s := range steps {
		if s.Op.mixer() {
			if err := b.step(s, nil, x, out, t, nil, 0, st, be, &w, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// Forward runs the whole decoder block on x [T, H] in place:
//
//	x ← x + Mixer(RMSNorm₁₊(x; w_in))
//	x ← x + MLP(RMSNorm₁₊(x; w_post))      (the MoE block in a sparse layer)
//
// by walking its steps of the block plan (blockPlan, the steps a device
// backend executes), recording "input", "mixer_in", the mixer's own
// stages, "mixer_out", "mlp_in", the MoE block's, "mlp_out" and "output"
// when rec is set. This is the one decoder block: sessions, bench and the
// trace all run it.
func (b *Block) Forward(x []float32, t int, eps float32, st *BlockState, be *Backend, buf *BlockBuffers, rec tensor.Recorder) error {
	return b.forward(x, t, nil, eps, st, be, buf, rec)
}

// forward is Forward over packed samples starting at rows segs (nil: one
// sequence continuing st).
func (b *Block) forward(x []float32, t int, segs []int, eps float32, st *BlockState, be *Backend, buf *BlockBuffers, rec tensor.Recorder) error {
	h := len(b.InputNorm)
	if len(x) != t*h {
		return fmt.Errorf("block input has %d values, want T·H = %d·%d", len(x), t, h)
	}
	steps, err := blockPlan(b.Mixer.Kind(), b.MoE != nil, -1, "")
	if err != nil {
		return err
	}
	normed, mix := buf.grow(t * h)
	var w blockWork
	defer w.release()
	for _, s := range steps {
		if err := b.step(s, x, normed, mix, t, segs, eps, st, be, &w, rec); err != nil {
			return err
		}
	}
	return nil
}

// blockWork is what one walk of a block hands from step to step.
type blockWork struct {
	mix mixerWork
	moe *moe.Work
	act []float32 // the dense MLP's SwiGLU rows
}

func (w *blockWork) release() {
	w.mix.release()
	bufpool.Put(w.act)
}

// mixer reports whether o is one of a token mixer's ops.
func (o PlanOp) mixer() bool {
	for _, k := range mixerKinds {
		if k != nil && k.owns(o) {
			return true
		}
	}
	return false
}

// step runs one plan step on the CPU: in is the normed rows a mixer or MLP
// reads, out their product, x the residual stream (nil: no residual add,
// as Mix runs the mixer alone). The layers record their own stages; the
// block records the residual stream's, and each residual add records the
// product it adds as its step's last stage. segs, when set, are the
// start rows of packed samples (packed.go).
func (b *Block) step(s PlanStep, x, in, out []float32, t int, segs []int, eps float32, st *BlockState, be *Backend, w *blockWork, rec tensor.Recorder) error {
	h := len(b.InputNorm)
	mm := packedMatMul(be.MatMul, segs, t)
	residual := func() error {
		if x != nil {
			rec.Record(s.Stages[len(s.Stages)-1], out, t, h)
			addInto(x, out)
		}
		return nil
	}
	switch s.Op {
	case OpRecord:
		rec.Record(s.Stages[0], x, t, h)
		return nil
	case OpNorm:
		nw := b.InputNorm
		if s.Norm == NormPost {
			nw = b.PostNorm
		}
		if err := norm.RMSNormOnePlus(in, x, nw, eps); err != nil {
			return err
		}
		rec.Record(s.Stages[0], in, t, h)
		return nil
	case OpMLPGateUp:
		w.act = bufpool.Get(t * b.MLP.Gate.Rows)
		return b.MLP.GateUp(w.act, in, t, mm)
	case OpMLPDown:
		if err := b.MLP.DownProj(out, w.act, t, mm); err != nil {
			return err
		}
		return residual()
	case OpMoERoute:
		w.moe = &moe.Work{T: t}
		return b.MoE.Route(w.moe, in, mm, rec)
	case OpMoEExperts:
		if len(segs) > 1 {
			return b.MoE.ExpertsSegments(out, w.moe, in, be.MoEKernel(), be.MatMul, segs, rec)
		}
		return b.MoE.Experts(out, w.moe, in, be.MoEKernel(), be.MatMul, rec)
	case OpMoEShared:
		return b.MoE.SharedExpert(w.moe, in, mm, rec)
	case OpMoECombine:
		b.MoE.Combine(out, w.moe)
		return residual()
	}
	mk := mixerOf(b.Mixer.Kind())
	if mk == nil || !mk.owns(s.Op) {
		return fmt.Errorf("plan: %s is not a block's op", s.Op)
	}
	if err := b.Mixer.step(s.Op, &w.mix, in, out, t, segs, st.Mixer, be, rec); err != nil {
		return fmt.Errorf("%s mixer: %w", b.Kind, err)
	}
	if mk.ops[len(mk.ops)-1].op == s.Op {
		return residual()
	}
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
