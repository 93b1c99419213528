package model

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/tensor"
)

// Session is one sequence's decoding state: a BlockState per decoder
// block. Feeding tokens in several calls equals feeding them in one. A
// Session serialises its own methods: Forward refuses a concurrent Forward
// (two callers would interleave one sequence), Reset waits for a running
// Forward, and Pos may be read at any time. Make one Session per sequence;
// the Model itself may be shared.
type Session struct {
	mu     sync.Mutex
	m      *Model
	states []*BlockState
	bufs   BlockBuffers
	pos    atomic.Int64
	// epoch counts Resets, and rewinds are the positions Restore went back
	// to since the last: they tell a stale Snapshot from a valid one.
	epoch   int
	rewinds []int
}

// NewSession returns an empty session (position 0).
func (m *Model) NewSession() *Session {
	s := &Session{m: m, states: make([]*BlockState, len(m.Blocks))}
	for i := range m.Blocks {
		s.states[i] = m.Blocks[i].NewState()
	}
	return s
}

// Pos is the number of tokens consumed so far.
func (s *Session) Pos() int { return int(s.pos.Load()) }

// Reset empties the caches for a new sequence, after any running Forward.
func (s *Session) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.states {
		st.Reset()
	}
	s.epoch, s.rewinds = s.epoch+1, nil
	s.pos.Store(0)
}

// errBusy is returned when a Session is used from two goroutines at once.
var errBusy = errors.New("session used from two goroutines at once: make one Session per goroutine (the Model itself may be shared)")

// Options tune a forward call.
type Options struct {
	// LastOnly computes logits for the last position only (generation).
	LastOnly bool
	// NoLogits skips the LM head: Forward returns nil logits (a prefill
	// whose logits nobody reads, or a trace that stops at final_norm).
	NoLogits bool
	// Record, if set, receives every intermediate as "embeddings",
	// "layers.N.<stage>", "final_norm" and "logits". The tensors are
	// views: copy what you keep.
	Record tensor.Recorder
	// Segments, if more than one, packs samples into ids: they are the
	// start rows of each (cu_seqlens without its last value; the first is
	// 0). Each sample starts from an empty cache at position 0 and sees
	// only its own tokens; the session must be at position 0, and after
	// the call it holds the last sample's caches, at its length. Logits
	// are every position's (not LastOnly); Record sees the packed rows,
	// and a state stage (final_state) the last sample's.
	Segments []int
	// out, if it has room, receives the logits (a runner's result), so
	// that they are not allocated twice.
	out []float32
}

// ErrEmpty is returned for an empty token sequence.
var ErrEmpty = errors.New("empty input: at least one token id is needed")

// idChecks counts CheckIDs' calls, so that a test holds a runner's
// forward pass to one check of its ids.
var idChecks atomic.Int64

// CheckIDs validates token ids against the vocabulary.
func (m *Model) CheckIDs(ids []int) error {
	idChecks.Add(1)
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

// CheckRows checks rows of token ids against m's vocabulary before any
// work, naming the input: "what: ..." for one row, "what row R: ..." for
// several.
func (m *Model) CheckRows(rows [][]int, what string) error {
	for r, ids := range rows {
		if err := m.CheckIDs(ids); err != nil {
			if len(rows) > 1 {
				return fmt.Errorf("%s row %d: %w", what, r, err)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// Forward feeds ids to the session and returns logits [T, V] (or [1, V]
// with LastOnly). The hidden state of the last position is Hidden().
func (s *Session) Forward(ids []int, be *Backend, opt Options) (*tensor.Tensor, error) {
	return s.forwardIDs(ids, be, opt, false)
}

// forwardIDs is Forward; checked says the ids were already checked
// against the vocabulary (a runner's batch, by CheckBatch).
func (s *Session) forwardIDs(ids []int, be *Backend, opt Options, checked bool) (*tensor.Tensor, error) {
	if !s.mu.TryLock() {
		return nil, errBusy
	}
	defer s.mu.Unlock()
	if err := be.checkSessionKernels(); err != nil {
		return nil, err
	}
	// Guard turns a fault on a mapped weight page (a shard truncated while
	// in use), here or on a kernel's worker goroutine, into an error naming
	// the file.
	var logits *tensor.Tensor
	err := s.m.Guard(func() (err error) {
		logits, err = s.forward(ids, be, opt, checked)
		return err
	})
	return logits, err
}

func (s *Session) forward(ids []int, be *Backend, opt Options, checked bool) (*tensor.Tensor, error) {
	m := s.m
	if !checked {
		if err := m.CheckIDs(ids); err != nil {
			return nil, err
		}
	}
	cfg := m.Config
	t, h := len(ids), cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	rec := opt.Record
	segs := opt.Segments
	if err := checkPacking(segs, t); err != nil {
		return nil, err
	}
	if len(segs) < 2 {
		segs = nil
	} else if s.Pos() != 0 {
		return nil, fmt.Errorf("packed segments start at position 0, and the sequence is at %d: reset it first", s.Pos())
	} else if opt.LastOnly {
		return nil, fmt.Errorf("packed segments give every position's logits or none, not the last only")
	}

	// x₀ = E[ids], a plain lookup.
	x := make([]float32, t*h)
	for i, id := range ids {
		m.Embed.Row(id, x[i*h:(i+1)*h])
	}
	rec.Record(stageEmbeddings, x, t, h)
	for li := range m.Blocks {
		if err := m.Blocks[li].forward(x, t, segs, eps, s.states[li], be, &s.bufs, prefixed(rec, li)); err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", li, m.Blocks[li].Kind, err)
		}
		m.dropBlock(li)
	}
	pos := s.pos.Add(int64(t))
	if segs != nil { // the caches are the last sample's, which a snapshot from before never held
		pos = int64(t - segs[len(segs)-1])
		s.pos.Store(pos)
		s.epoch, s.rewinds = s.epoch+1, nil
	}

	// h = RMSNorm₁₊(x; w_final); logits = h W_lmᵀ.
	normed, _ := s.bufs.grow(t * h)
	if err := norm.RMSNormOnePlus(normed, x, m.FinalNorm, eps); err != nil {
		return nil, err
	}
	rec.Record(stageFinalNorm, normed, t, h)
	if opt.NoLogits {
		return nil, nil
	}
	rows := normed
	if opt.LastOnly {
		rows, t = normed[(t-1)*h:], 1
	}
	var logits *tensor.Tensor
	if n := t * cfg.VocabSize; len(opt.out) >= n {
		logits = &tensor.Tensor{Data: opt.out[:n], Shape: []int{t, cfg.VocabSize}}
	} else {
		logits = tensor.New(t, cfg.VocabSize)
	}
	if err := packedMatMul(be.MatMul, segs, t).MatMulT(logits.Data, rows, t, m.LMHead); err != nil {
		return nil, fmt.Errorf("lm_head: %w", err)
	}
	if m.streaming && m.store != nil {
		_ = m.store.DropPages(m.LMHead)
	}
	rec.Record(stageLogits, logits.Data, logits.Shape...)
	if i := firstNonFinite(logits.Data); i >= 0 {
		at := fmt.Sprintf("position %d", int(pos)-t+i/cfg.VocabSize)
		if segs != nil {
			at = fmt.Sprintf("packed row %d", i/cfg.VocabSize)
		}
		return nil, fmt.Errorf("non-finite logit %v at %s, token %d: a weight or an intermediate overflowed (check the checkpoint with --check-weights)",
			logits.Data[i], at, i%cfg.VocabSize)
	}
	return logits, nil
}

// Layer runs decoder block i alone on x [T, H] (the block's input, e.g. a
// reference file's "layers.i.input"), continuing this session's state of
// that block, and returns the block's output. It is the teacher-forced
// entry of `qwenref trace --compare`: each block sees the reference's own
// inputs, so differences do not accumulate with depth.
func (s *Session) Layer(i int, x []float32, t int, be *Backend, rec tensor.Recorder) ([]float32, error) {
	if !s.mu.TryLock() {
		return nil, errBusy
	}
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.m.Blocks) {
		return nil, fmt.Errorf("layer %d outside the model's %d layers", i, len(s.m.Blocks))
	}
	if err := be.checkSessionKernels(); err != nil {
		return nil, err
	}
	out := append([]float32(nil), x...)
	err := s.m.Guard(func() error {
		return s.m.Blocks[i].Forward(out, t, float32(s.m.Config.RMSNormEps), s.states[i], be, &s.bufs, rec)
	})
	if err != nil {
		return nil, fmt.Errorf("layer %d (%s): %w", i, s.m.Blocks[i].Kind, err)
	}
	return out, nil
}

// Forward runs a batch of equal-length sequences from position 0 on a
// fresh Runner and returns logits [B, T, V].
func (m *Model) Forward(batch [][]int, be *Backend) (*tensor.Tensor, error) {
	if len(batch) == 0 {
		return nil, ErrEmpty
	}
	r, err := NewRunner(m, be, len(batch))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Forward(batch, RunOptions{Logits: AllLogits})
}

func prefixed(r tensor.Recorder, layer int) tensor.Recorder {
	if r == nil {
		return nil
	}
	p := fmt.Sprintf("layers.%d.", layer)
	return func(stage string, t *tensor.Tensor) { r(p+stage, t) }
}
