package model

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/tensor"
)

// Session is one sequence's decoding state: a conv and recurrent state per
// GDN layer and a KV cache per attention layer. Feeding tokens in several
// calls equals feeding them in one. A Session is not safe for concurrent
// use; make one per goroutine.
type Session struct {
	busy atomic.Bool // guards against concurrent use, which would corrupt the caches
	m    *Model
	gdn  []*gateddelta.State
	kv   []*attention.Cache
	pos  int
}

// NewSession returns an empty session (position 0).
func (m *Model) NewSession() *Session {
	s := &Session{m: m, gdn: make([]*gateddelta.State, len(m.Blocks)), kv: make([]*attention.Cache, len(m.Blocks))}
	for i, b := range m.Blocks {
		if b.Kind == FullAttention {
			s.kv[i] = &attention.Cache{}
		} else {
			s.gdn[i] = gateddelta.NewState(b.GDN.Dims)
		}
	}
	return s
}

// Pos is the number of tokens consumed so far.
func (s *Session) Pos() int { return s.pos }

// Reset empties the caches for a new sequence.
func (s *Session) Reset() {
	for i := range s.m.Blocks {
		if s.kv[i] != nil {
			s.kv[i].Reset()
		} else {
			s.gdn[i].Reset()
		}
	}
	s.pos = 0
}

// Options tune a forward call.
type Options struct {
	// LastOnly computes logits for the last position only (generation).
	LastOnly bool
	// Record, if set, receives every intermediate as "embeddings",
	// "layers.N.<stage>", "final_norm" and "logits". The tensors are
	// views: copy what you keep.
	Record tensor.Recorder
}

// ErrEmpty is returned for an empty token sequence.
var ErrEmpty = errors.New("empty input: at least one token id is needed")

// CheckIDs validates token ids against the vocabulary.
func (m *Model) CheckIDs(ids []int) error {
	if len(ids) == 0 {
		return ErrEmpty
	}
	for i, id := range ids {
		if id < 0 || id >= m.Config.VocabSize {
			return fmt.Errorf("token id %d at position %d is outside the vocabulary [0, %d)", id, i, m.Config.VocabSize)
		}
	}
	return nil
}

// Forward feeds ids to the session and returns logits [T, V] (or [1, V]
// with LastOnly). The hidden state of the last position is Hidden().
func (s *Session) Forward(ids []int, be *Backend, opt Options) (*tensor.Tensor, error) {
	if !s.busy.CompareAndSwap(false, true) {
		return nil, errors.New("session used from two goroutines at once: make one Session per goroutine (the Model itself may be shared)")
	}
	defer s.busy.Store(false)
	m := s.m
	if err := m.CheckIDs(ids); err != nil {
		return nil, err
	}
	cfg := m.Config
	t, h := len(ids), cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	rec := opt.Record

	// x₀ = E[ids], a plain lookup.
	x := make([]float32, t*h)
	for i, id := range ids {
		m.Embed.Row(id, x[i*h:(i+1)*h])
	}
	rec.Record("embeddings", x, t, h)

	normed := make([]float32, t*h)
	mix := make([]float32, t*h)
	for li := range m.Blocks {
		b := &m.Blocks[li]
		lrec := prefixed(rec, li)
		lrec.Record("input", x, t, h)
		// x ← x + Mixer(RMSNorm₁₊(x; w_in))
		if err := norm.RMSNormOnePlus(normed, x, b.InputNorm, eps); err != nil {
			return nil, err
		}
		lrec.Record("mixer_in", normed, t, h)
		var err error
		if b.Kind == FullAttention {
			err = b.Attn.Forward(mix, normed, t, s.kv[li], be.attnOps(), lrec)
		} else {
			err = b.GDN.Forward(mix, normed, t, s.gdn[li], be.gdnOps(), lrec)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", li, b.Kind, err)
		}
		lrec.Record("mixer_out", mix, t, h)
		addInto(x, mix)
		// x ← x + MLP(RMSNorm₁₊(x; w_post))
		if err := norm.RMSNormOnePlus(normed, x, b.PostNorm, eps); err != nil {
			return nil, err
		}
		lrec.Record("mlp_in", normed, t, h)
		if err := b.MLP.Forward(mix, normed, t, be.MatMul); err != nil {
			return nil, fmt.Errorf("layer %d: %w", li, err)
		}
		lrec.Record("mlp_out", mix, t, h)
		addInto(x, mix)
		lrec.Record("output", x, t, h)
		m.dropBlock(li)
	}
	s.pos += t

	// h = RMSNorm₁₊(x; w_final); logits = h W_lmᵀ.
	if err := norm.RMSNormOnePlus(normed, x, m.FinalNorm, eps); err != nil {
		return nil, err
	}
	rec.Record("final_norm", normed, t, h)
	rows := normed
	if opt.LastOnly {
		rows, t = normed[(t-1)*h:], 1
	}
	logits := tensor.New(t, cfg.VocabSize)
	if err := be.MatMul.MatMulT(logits.Data, rows, t, m.LMHead); err != nil {
		return nil, fmt.Errorf("lm_head: %w", err)
	}
	if m.streaming && m.store != nil {
		_ = m.store.DropPages(m.LMHead)
	}
	rec.Record("logits", logits.Data, logits.Shape...)
	if i := firstNonFinite(logits.Data); i >= 0 {
		return nil, fmt.Errorf("non-finite logit %v at position %d, token %d: a weight or an intermediate overflowed (check the checkpoint with --check-weights)",
			logits.Data[i], s.pos-t+i/cfg.VocabSize, i%cfg.VocabSize)
	}
	return logits, nil
}

// Forward runs a batch of equal-length sequences from position 0 and
// returns logits [B, T, V]. Each row runs in its own session.
func (m *Model) Forward(batch [][]int, be *Backend) (*tensor.Tensor, error) {
	if len(batch) == 0 {
		return nil, ErrEmpty
	}
	t := len(batch[0])
	for b, ids := range batch {
		if len(ids) != t {
			return nil, fmt.Errorf("batch row %d has %d tokens but row 0 has %d: rows must have equal length", b, len(ids), t)
		}
		if err := m.CheckIDs(ids); err != nil {
			return nil, fmt.Errorf("batch row %d: %w", b, err)
		}
	}
	v := m.Config.VocabSize
	out := tensor.New(len(batch), t, v)
	for b, ids := range batch {
		lg, err := m.NewSession().Forward(ids, be, Options{})
		if err != nil {
			return nil, fmt.Errorf("batch row %d: %w", b, err)
		}
		copy(out.Data[b*t*v:], lg.Data)
	}
	return out, nil
}

func addInto(x, y []float32) {
	for i, v := range y {
		x[i] += v
	}
}

func prefixed(r tensor.Recorder, layer int) tensor.Recorder {
	if r == nil {
		return nil
	}
	p := fmt.Sprintf("layers.%d.", layer)
	return func(stage string, t *tensor.Tensor) { r(p+stage, t) }
}
