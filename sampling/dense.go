package sampling

import (
	"fmt"
	"math"
	"slices"

	"github.com/qwenref/qwenref/internal/vecmath"
)

// The first truncating warper sees the whole vocabulary; each has a pass
// over it that finds its survivors without sorting the vocabulary (top-k: a
// threshold that rises with a bounded buffer; top-p: one vectorized
// exponential, a histogram of the probabilities, and a pass collecting the
// tokens above the boundary bucket; min-p: a threshold below the maximum).
// The survivors are candidates, and every later warper works on them alone
// (a filtered score is −Inf, which adds nothing to any softmax or sum).

var negInf = float32(math.Inf(-1))

// filter runs every processor. dense reports that nothing was dropped (no
// truncating warper), so the processed scores are processed(x, i) for
// every i; otherwise s.cands holds the survivors in id order.
func (s *Sampler) filter(x []float32) (dense bool, err error) {
	c := s.cfg
	if err := s.checkPenalty(x); err != nil {
		return false, err
	}
	if !c.truncates() {
		_, err := maxRaw(x)
		return true, err
	}
	first := ""
	switch {
	case c.topHOn():
		err = s.topKDense(x, topHCandidates)
	case c.topKOn():
		first, err = NameTopK, s.topKDense(x, c.TopK)
	case c.topPOn():
		first, err = NameTopP, s.topPDense(s.penalizedSrc(x), c.TopP)
	case c.minPOn():
		first, err = NameMinP, s.minPDense(s.penalizedSrc(x), c.MinP)
	default:
		err = s.allDense(x)
	}
	if err != nil {
		return false, err
	}
	for _, st := range []struct {
		on   bool
		name string
		run  func()
	}{
		{c.topHOn(), NameTopH, func() { s.topHSparse(c.TopH) }},
		{c.topKOn(), NameTopK, func() { s.topKSparse(c.TopK) }},
		{c.topPOn(), NameTopP, func() { s.topPSparse(c.TopP) }},
		{c.minPOn(), NameMinP, func() { s.minPSparse(c.MinP) }},
		{c.typicalOn(), NameTypical, func() { s.typicalSparse(c.TypicalP) }},
		{c.epsilonOn(), NameEpsilon, func() { s.epsilonSparse(c.EpsilonCutoff) }},
		{c.etaOn(), NameEta, func() { s.etaSparse(c.EtaCutoff) }},
	} {
		if st.on && st.name != first && len(s.cands) > 0 {
			st.run()
		}
	}
	return false, nil
}

// maxRaw is the largest value, −Inf if all are; NaN and +Inf are errors.
func maxRaw(x []float32) (float32, error) {
	mx := negInf
	for i, v := range x {
		if v <= mx {
			continue
		}
		if v != v || v > math.MaxFloat32 {
			return 0, nonFinite(i, v)
		}
		mx = v
	}
	return mx, nil
}

// checkPenalty rejects a finite logit that the repetition penalty (in
// float32, as torch casts it) takes to +Inf or NaN, whose softmax torch's
// multinomial refuses, naming the penalty rather than the logit: a
// penalty under about 1e-38, or one that is 0 in float32.
func (s *Sampler) checkPenalty(x []float32) error {
	for _, id := range s.seenIDs {
		v := x[id]
		if p := s.penalize(v); v == v && v <= math.MaxFloat32 && (p != p || p > math.MaxFloat32) {
			return fmt.Errorf("sampling: repetition penalty %g takes logit %g (token %d) to %v", s.cfg.RepetitionPenalty, v, id, p)
		}
	}
	return nil
}

// penalizedSrc is x with the repetition penalty applied, in scratch space
// (x itself when there is no penalty).
func (s *Sampler) penalizedSrc(x []float32) []float32 {
	if s.seen == nil {
		return x
	}
	s.work = grow(s.work, len(x))
	copy(s.work, x)
	for _, id := range s.seenIDs {
		s.work[id] = s.penalize(x[id])
	}
	return s.work
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// checkScaled rejects a maximum that the temperature took to +Inf, whose
// softmax is NaN (torch's multinomial fails on it).
func (s *Sampler) checkScaled(raw, scaled float32) error {
	if scaled > math.MaxFloat32 {
		return fmt.Errorf("sampling: temperature %g takes logit %g to +Inf", s.cfg.Temperature, raw)
	}
	return nil
}

// topKDense keeps the tokens whose processed score is ≥ the k-th highest.
// Candidates go to a buffer; when it fills, it is cut to those ≥ its k-th
// value, and the pass skips every logit whose processed score is below
// that, which most are, with a single comparison. Seen ids, whose scores
// the penalty changed, enter the buffer first and are skipped in the pass.
func (s *Sampler) topKDense(x []float32, k int) error {
	k = min(k, len(x))
	limit := 2*k + 64
	c := s.cands[:0]
	for _, id := range s.seenIDs {
		c = append(c, cand{id, s.scale(s.penalize(x[id]))})
	}
	thr := negInf
	if len(c) >= limit {
		var kth float32
		c, kth = s.cut(c, k)
		thr = s.lowerBound(kth)
		limit = max(limit, 2*len(c))
	}
	for i, v := range x {
		if v < thr {
			continue
		}
		if v != v || v > math.MaxFloat32 {
			return nonFinite(i, v)
		}
		if s.seen != nil && s.isSeen(i) {
			continue
		}
		c = append(c, cand{int32(i), s.scale(v)})
		if len(c) >= limit {
			var kth float32
			c, kth = s.cut(c, k)
			thr = s.lowerBound(kth)
			limit = max(limit, 2*len(c)) // ties with the k-th stay: let the buffer grow
		}
	}
	c, _ = s.cut(c, k)
	s.cands = finiteByID(c)
	return nil
}

// cut keeps the candidates ≥ the k-th highest score and returns that score
// (−Inf, keeping all, when there are at most k).
func (s *Sampler) cut(c []cand, k int) ([]cand, float32) {
	if len(c) <= k {
		return c, negInf
	}
	s.vals = grow(s.vals, len(c))
	for i, t := range c {
		s.vals[i] = t.val
	}
	kth := kthLargest(s.vals, k)
	out := c[:0]
	for _, t := range c {
		if t.val >= kth {
			out = append(out, t)
		}
	}
	return out, kth
}

// lowerBound is the smallest logit whose scaled score is ≥ v: the
// temperature's float32 division can map neighbouring logits to one score,
// and those tie with v as torch.topk's ≥ comparison sees it.
func (s *Sampler) lowerBound(v float32) float32 {
	if !s.cfg.tempOn() || v == negInf {
		return v
	}
	lo, hi := orderKey(negInf), orderKey(float32(math.Inf(1)))
	for lo < hi {
		mid := lo + (hi-lo)/2
		if s.scale(fromOrderKey(mid)) >= v {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return fromOrderKey(lo)
}

// orderKey maps float32 (not NaN) to uint32 preserving order.
func orderKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b>>31 != 0 {
		return ^b
	}
	return b | 1<<31
}

func fromOrderKey(k uint32) float32 {
	if k>>31 != 0 {
		return math.Float32frombits(k &^ (1 << 31))
	}
	return math.Float32frombits(^k)
}

// kthLargest returns the k-th largest of v (1-based), reordering v. The
// partition is three-way, so that many equal values (a bf16 model's logits
// tie often) cost no more than distinct ones.
func kthLargest(v []float32, k int) float32 {
	lo, hi, want := 0, len(v), k-1
	for {
		p := median3(v[lo], v[lo+(hi-lo)/2], v[hi-1])
		// v[lo:gt] > p, v[gt:i] == p, v[lt:hi] < p
		gt, i, lt := lo, lo, hi
		for i < lt {
			switch x := v[i]; {
			case x > p:
				v[gt], v[i] = v[i], v[gt]
				gt++
				i++
			case x < p:
				lt--
				v[lt], v[i] = v[i], v[lt]
			default:
				i++
			}
		}
		switch {
		case want < gt:
			hi = gt
		case want >= lt:
			lo = lt
		default:
			return p
		}
	}
}

func median3(a, b, c float32) float32 {
	if a > b {
		a, b = b, a
	}
	if b > c {
		b = c
	}
	return max(a, b)
}

// finiteByID drops −Inf candidates and sorts the rest by id.
func finiteByID(c []cand) []cand {
	out := c[:0]
	for _, t := range c {
		if t.val != negInf {
			out = append(out, t)
		}
	}
	sortByID(out)
	return out
}

// histBits is the shift that keeps a float32's exponent and its top four
// mantissa bits: 16 buckets per octave of probability.
const histBits = 19

// topPDense is TopPLogitsWarper over the whole vocabulary. It needs the
// normalizer (the tail it drops holds 1 − top_p of the mass), so it takes
// one vectorized exponential of every score; a histogram of those finds
// the bucket where the descending cumulative mass reaches top_p, and only
// the tokens from a bucket below it on are collected and sorted. The exact
// rule is then applied to them: token j (descending, ties by id) goes when
// float32((Z − P_j)/Z) ≤ float32(1 − top_p), P_j the mass before it, which
// is transformers' ascending cumulative sum; the top token always stays.
// Z sums the collected tokens' exact exponentials and only the tail's
// float32 ones: Z − P_j is the small mass below, and an approximate Z
// would put the approximation's whole error into it.
func (s *Sampler) topPDense(src []float32, topP float64) error {
	mraw, err := maxRaw(src)
	if err != nil || mraw == negInf {
		s.cands = s.cands[:0]
		return err
	}
	m := s.scale(mraw)
	if err := s.checkScaled(mraw, m); err != nil {
		return err
	}
	e := s.exps(src, m)
	s.hist = grow(s.hist, 1<<(32-histBits))
	clear(s.hist)
	for _, v := range e {
		s.hist[math.Float32bits(v)>>histBits] += float64(v)
	}
	var z float64
	for _, h := range s.hist {
		z += h
	}
	target, cum, b := topP*z, 0.0, len(s.hist)-1
	for ; b > 0; b-- {
		if cum += s.hist[b]; cum >= target {
			break
		}
	}
	thr32 := float32(1 - topP)
	for low := b - 1; ; low -= 16 {
		low = max(low, 0)
		eThr := math.Float32frombits(uint32(low) << histBits)
		c := s.cands[:0]
		var zExact float64 // the candidates exactly, the rest from the float32 exponentials
		for i, v := range e {
			if v >= eThr {
				t := s.scale(src[i])
				c = append(c, cand{int32(i), t})
				zExact += math.Exp(float64(t) - float64(m))
			} else {
				zExact += float64(v)
			}
		}
		s.cands = c
		if s.topPWalk(m, zExact, thr32) || low == 0 {
			s.cands = finiteByID(s.cands)
			return nil
		}
	}
}

// exps sets scratch[i] = e^(src[i]/T − m) (the reciprocal of the
// temperature is close enough for a normalizer) and returns it.
func (s *Sampler) exps(src []float32, m float32) []float32 {
	inv := float32(1)
	if s.cfg.tempOn() {
		inv = 1 / s.temp
	}
	s.expBuf = grow(s.expBuf, len(src))
	e := s.expBuf
	for i, v := range src {
		e[i] = v*inv - m
	}
	vecmath.ExpInPlace(e)
	return e
}

// topPWalk applies the top-p rule to s.cands given the maximum m and the
// normalizer z over the whole vocabulary, keeping the survivors. It
// reports whether the rule dropped something, i.e. whether the candidates
// reached below the boundary.
func (s *Sampler) topPWalk(m float32, z float64, thr32 float32) bool {
	c := s.cands
	slices.SortFunc(c, byValDescIDDesc)
	p := 0.0
	for j, t := range c {
		if j > 0 && float32((z-p)/z) <= thr32 {
			s.cands = c[:j]
			return true
		}
		p += math.Exp(float64(t.val) - float64(m))
	}
	return float32((z-p)/z) <= thr32
}

func byValDescIDDesc(a, b cand) int {
	switch {
	case a.val > b.val:
		return -1
	case a.val < b.val:
		return 1
	}
	return int(b.id) - int(a.id)
}

// minPDense is MinPLogitsWarper over the whole vocabulary: a token stays
// when e^(score − max) ≥ min_p (its probability is ≥ min_p times the top
// one's). Only logits above a threshold a little below that are checked.
func (s *Sampler) minPDense(src []float32, minP float64) error {
	mraw, err := maxRaw(src)
	if err != nil || mraw == negInf {
		s.cands = s.cands[:0]
		return err
	}
	m := s.scale(mraw)
	if err := s.checkScaled(mraw, m); err != nil {
		return err
	}
	bound := float64(m) + math.Log(minP)
	bound -= 1e-3 + 1e-6*math.Abs(bound)
	thr := negInf
	if bound > -math.MaxFloat32 {
		thr = s.lowerBound(float32(bound))
	}
	c := s.cands[:0]
	for i, v := range src {
		if v < thr {
			continue
		}
		if t := s.scale(v); math.Exp(float64(t)-float64(m)) >= minP {
			c = append(c, cand{int32(i), t})
		}
	}
	s.cands = c
	return nil
}

// allDense makes every finite processed score a candidate, for the warpers
// that have no pass of their own (typical, epsilon, eta first).
func (s *Sampler) allDense(x []float32) error {
	if _, err := maxRaw(x); err != nil {
		return err
	}
	c := s.cands[:0]
	for i := range x {
		if v := s.processed(x, i); v != negInf {
			c = append(c, cand{int32(i), v})
		}
	}
	s.cands = c
	return nil
}

// drawDense draws from the softmax of every processed score (no warper
// dropped any) with u in [0, 1).
func (s *Sampler) drawDense(x []float32, u float64) (int, error) {
	src := s.penalizedSrc(x)
	mraw, err := maxRaw(src)
	if err != nil {
		return 0, err
	}
	if mraw == negInf {
		return 0, ErrNoToken
	}
	m := s.scale(mraw)
	if err := s.checkScaled(mraw, m); err != nil {
		return 0, err
	}
	e := s.exps(src, m)
	var z0, z1, z2, z3 float64
	i := 0
	for ; i+4 <= len(e); i += 4 {
		z0 += float64(e[i])
		z1 += float64(e[i+1])
		z2 += float64(e[i+2])
		z3 += float64(e[i+3])
	}
	for ; i < len(e); i++ {
		z0 += float64(e[i])
	}
	r := u * (z0 + z1 + z2 + z3)
	last := 0
	for i, v := range e {
		if v > 0 {
			last = i
			if r -= float64(v); r < 0 {
				return i, nil
			}
		}
	}
	return last, nil
}
