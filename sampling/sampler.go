package sampling

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// cand is a token that survived the processors so far, with its processed
// score.
type cand struct {
	id  int32
	val float32
}

// Sampler applies a Config to one sequence's logits and chooses tokens. It
// keeps the token ids seen (for the repetition penalty) and scratch space
// sized by the vocabulary, so one Sampler serves one generation. It is not
// safe for concurrent use.
type Sampler struct {
	cfg   Config
	vocab int
	rng   *rand.Rand

	pen, temp float32  // the penalty and temperature as float32, as torch casts them
	seen      []uint64 // bitset of seen ids, only with a penalty
	seenIDs   []int32  // the seen ids, each once

	cands, spare []cand
	work         []float32 // vocab-sized: the penalized scores
	expBuf       []float32 // vocab-sized: exponentials
	vals         []float32
	hist         []float64
}

// New returns a Sampler for logits of vocab entries. The seed fixes the
// draws (a PCG stream; draws are qwenref's own, not torch's).
func New(cfg Config, vocab int, seed uint64) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if vocab <= 0 || vocab > math.MaxInt32 {
		return nil, fmt.Errorf("sampling: vocabulary size must be in [1, 2^31), got %d", vocab)
	}
	s := &Sampler{cfg: cfg, vocab: vocab, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
	s.pen, s.temp = float32(cfg.RepetitionPenalty), float32(cfg.Temperature)
	if cfg.penaltyOn() {
		s.seen = make([]uint64, (vocab+63)/64)
	}
	return s, nil
}

// Config returns the configuration s applies.
func (s *Sampler) Config() Config { return s.cfg }

// Observe adds token ids to the history the repetition penalty looks at:
// the prompt before the first Next (transformers penalizes the prompt's
// tokens too). Next adds the tokens it returns itself.
func (s *Sampler) Observe(ids ...int) error {
	for _, id := range ids {
		if id < 0 || id >= s.vocab {
			return fmt.Errorf("sampling: token id %d outside the vocabulary [0, %d)", id, s.vocab)
		}
	}
	if s.seen == nil {
		return nil
	}
	for _, id := range ids {
		if w, b := id>>6, uint64(1)<<(id&63); s.seen[w]&b == 0 {
			s.seen[w] |= b
			s.seenIDs = append(s.seenIDs, int32(id))
		}
	}
	return nil
}

func (s *Sampler) isSeen(i int) bool { return s.seen[i>>6]&(1<<(i&63)) != 0 }

// penalize is RepetitionPenaltyLogitsProcessor's float32 arithmetic.
func (s *Sampler) penalize(x float32) float32 {
	if x < 0 {
		return x * s.pen
	}
	return x / s.pen
}

// scale is TemperatureLogitsWarper's float32 division.
func (s *Sampler) scale(x float32) float32 {
	if s.cfg.tempOn() {
		return x / s.temp
	}
	return x
}

// processed is token i's score after the penalty and the temperature.
func (s *Sampler) processed(x []float32, i int) float32 {
	v := x[i]
	if s.seen != nil && s.isSeen(i) {
		v = s.penalize(v)
	}
	return s.scale(v)
}

func (s *Sampler) checkLen(logits []float32) error {
	if len(logits) != s.vocab {
		return fmt.Errorf("sampling: %d logits for a vocabulary of %d", len(logits), s.vocab)
	}
	return nil
}

func nonFinite(i int, v float32) error {
	return fmt.Errorf("sampling: logit %d is %v: NaN and +Inf cannot be sampled from", i, v)
}

// Next chooses the next token: the argmax of the processed scores when
// greedy (ties go to the lowest id, as torch.argmax), otherwise a draw from
// their softmax. The token joins the history, as generate appends it to
// input_ids. A NaN or +Inf logit is an error.
func (s *Sampler) Next(logits []float32) (int, error) {
	if err := s.checkLen(logits); err != nil {
		return 0, err
	}
	var id int
	var err error
	if !s.cfg.DoSample {
		id, err = s.greedy(logits)
	} else {
		id, err = s.draw(logits)
	}
	if err != nil {
		return 0, err
	}
	return id, s.Observe(id)
}

// greedy is the argmax of the penalized scores in one pass: only a value
// not below the best so far looks further (NaN fails the test too, and is
// caught there), and seen ids were scored before the pass.
func (s *Sampler) greedy(x []float32) (int, error) {
	best, bv := -1, float32(math.Inf(-1))
	for _, id := range s.seenIDs {
		if v := s.penalize(x[id]); v > bv || (v == bv && (best < 0 || int(id) < best)) {
			best, bv = int(id), v
		}
	}
	for i, v := range x {
		if v < bv {
			continue
		}
		if v != v || v > math.MaxFloat32 {
			return 0, nonFinite(i, v)
		}
		if s.seen != nil && s.isSeen(i) {
			continue
		}
		if v > bv || best < 0 || i < best {
			best, bv = i, v
		}
	}
	if best < 0 || math.IsInf(float64(bv), -1) {
		return 0, ErrNoToken
	}
	return best, nil
}

// draw runs the warpers and draws from the softmax of what survives.
func (s *Sampler) draw(x []float32) (int, error) {
	dense, err := s.filter(x)
	if err != nil {
		return 0, err
	}
	u := s.rng.Float64()
	if dense {
		return s.drawDense(x, u)
	}
	c := s.cands
	if len(c) == 0 {
		return 0, ErrNoToken
	}
	m := c[0].val
	for _, t := range c {
		m = max(m, t.val)
	}
	if m > math.MaxFloat32 {
		return 0, fmt.Errorf("sampling: temperature %g takes a logit to +Inf", s.cfg.Temperature)
	}
	var z float64
	for _, t := range c {
		z += math.Exp(float64(t.val) - float64(m))
	}
	r := u * z
	for _, t := range c {
		if r -= math.Exp(float64(t.val) - float64(m)); r < 0 {
			return int(t.id), nil
		}
	}
	return int(c[len(c)-1].id), nil // rounding left a sliver of r
}

// Process returns the processed scores transformers' LogitsProcessorList
// would return for logits and the history so far: dropped tokens are −Inf.
// It does not draw, and leaves the history as it is.
func (s *Sampler) Process(logits []float32) ([]float32, error) {
	if err := s.checkLen(logits); err != nil {
		return nil, err
	}
	out := make([]float32, len(logits))
	if !s.cfg.DoSample {
		if _, err := s.greedy(logits); err != nil && err != ErrNoToken {
			return nil, err
		}
		for i := range logits {
			out[i] = s.processed(logits, i)
		}
		return out, nil
	}
	dense, err := s.filter(logits)
	if err != nil {
		return nil, err
	}
	if dense {
		for i := range logits {
			out[i] = s.processed(logits, i)
		}
		return out, nil
	}
	inf := float32(math.Inf(-1))
	for i := range out {
		out[i] = inf
	}
	for _, c := range s.cands {
		out[c.id] = c.val
	}
	return out, nil
}

// sortByID restores the candidates' id order, which every stage keeps
// between stages so that sums run in the same order however the set was
// found.
func sortByID(c []cand) {
	slices.SortFunc(c, func(a, b cand) int { return int(a.id) - int(b.id) })
}
