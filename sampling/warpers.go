package sampling

import (
	"math"
	"slices"
)

// The warpers on the candidates (s.cands, id order, all finite and
// non-empty). Each follows its transformers class step by step; sums run
// in float64 over the candidates in id order, and the comparisons that
// torch makes in float32 are made in float32. Ties in a sort go by id, as
// a stable sort of the vocabulary orders them (CUDA's radix sort of a
// large vocabulary is one).

// softmaxStats returns the maximum score and Σ e^(v − max).
func softmaxStats(c []cand) (float32, float64) {
	m := c[0].val
	for _, t := range c {
		m = max(m, t.val)
	}
	var z float64
	for _, t := range c {
		z += math.Exp(float64(t.val) - float64(m))
	}
	return m, z
}

// keepSorted replaces s.cands with keep (in any order, possibly a prefix
// of s.spare), in id order.
func (s *Sampler) keepSorted(keep []cand) {
	s.spare = append(s.spare[:0], keep...)
	sortByID(s.spare)
	s.cands, s.spare = s.spare, s.cands
}

// topKSparse is TopKLogitsWarper: scores below the k-th highest go.
func (s *Sampler) topKSparse(k int) {
	c, _ := s.cut(s.cands, k)
	s.cands = c
}

// topPSparse is TopPLogitsWarper on the candidates.
func (s *Sampler) topPSparse(topP float64) {
	m, z := softmaxStats(s.cands)
	s.topPWalk(m, z, float32(1-topP))
	sortByID(s.cands)
}

// minPSparse is MinPLogitsWarper: probability < min_p × the top one's goes,
// i.e. e^(v − max) < min_p (the top token, at 1, always stays).
func (s *Sampler) minPSparse(minP float64) {
	m := s.cands[0].val
	for _, t := range s.cands {
		m = max(m, t.val)
	}
	out := s.cands[:0]
	for _, t := range s.cands {
		if math.Exp(float64(t.val)-float64(m)) >= minP {
			out = append(out, t)
		}
	}
	s.cands = out
}

// typicalSparse is TypicalLogitsWarper: with H the entropy, tokens are
// ordered by |−log p − H| (float32, ties by id); last is the count of the
// leading ones whose cumulative probability is < mass (at most n−1); the
// tokens whose distance exceeds the last one's go, the first always stays.
func (s *Sampler) typicalSparse(mass float64) {
	c := s.cands
	m, z := softmaxStats(c)
	lse := float64(m) + math.Log(z)
	var h float64
	for _, t := range c {
		p := math.Exp(float64(t.val)-float64(m)) / z
		h += p * (lse - float64(t.val))
	}
	type ranked struct {
		cand
		dist float32
		p    float64
	}
	r := make([]ranked, len(c))
	for i, t := range c {
		r[i] = ranked{t, float32(math.Abs(lse - float64(t.val) - h)), math.Exp(float64(t.val)-float64(m)) / z}
	}
	slices.SortStableFunc(r, func(a, b ranked) int {
		switch {
		case a.dist < b.dist:
			return -1
		case a.dist > b.dist:
			return 1
		}
		return 0 // stable: id order
	})
	mass32, cum, last := float32(mass), 0.0, 0
	for _, t := range r {
		if cum += t.p; float32(cum) < mass32 {
			last++
		} else {
			break
		}
	}
	last = min(last, len(r)-1)
	limit := r[last].dist
	keep := s.spare[:0]
	for i, t := range r {
		if i == 0 || t.dist <= limit {
			keep = append(keep, t.cand)
		}
	}
	s.keepSorted(keep)
}

// epsilonSparse is EpsilonLogitsWarper: probability < ε goes, unless the
// score is the top one.
func (s *Sampler) epsilonSparse(eps float64) {
	m, z := softmaxStats(s.cands)
	eps32 := float32(eps)
	s.dropBelow(m, z, eps32)
}

// etaSparse is EtaLogitsWarper: probability < min(ε, √ε·e^−H) goes (in
// float32, as its ε is a float32 tensor), unless the score is the top one.
func (s *Sampler) etaSparse(eps float64) {
	m, z := softmaxStats(s.cands)
	lse := float64(m) + math.Log(z)
	var h float64
	for _, t := range s.cands {
		h += math.Exp(float64(t.val)-float64(m)) / z * (lse - float64(t.val))
	}
	eps32 := float32(eps)
	eta := min(eps32, float32(math.Sqrt(float64(eps32)))*float32(math.Exp(-float64(float32(h)))))
	s.dropBelow(m, z, eta)
}

func (s *Sampler) dropBelow(m float32, z float64, limit float32) {
	out := s.cands[:0]
	for _, t := range s.cands {
		if t.val == m || float32(math.Exp(float64(t.val)-float64(m))/z) >= limit {
			out = append(out, t)
		}
	}
	s.cands = out
}

// topHSparse is TopHLogitsWarper: of the 100 highest scores (descending,
// ties by id) and their renormalized distribution with entropy H, the
// prefix whose cumulative entropy −Σ p log p stays ≤ top_h·H is kept (the
// first always; a probability that underflows float32 ends it, as torch's
// NaN does), and every other token goes.
func (s *Sampler) topHSparse(topH float64) {
	s.spare = append(s.spare[:0], s.cands...)
	top := s.spare
	slices.SortFunc(top, func(a, b cand) int {
		switch {
		case a.val > b.val:
			return -1
		case a.val < b.val:
			return 1
		}
		return int(a.id) - int(b.id)
	})
	top = top[:min(len(top), topHCandidates)]
	m, z := softmaxStats(top)
	lz := math.Log(z)
	var h float64
	for _, t := range top {
		lp := float64(t.val) - float64(m) - lz
		h -= math.Exp(lp) * lp
	}
	tau := float32(float32(h) * float32(topH))
	n, cum := 1, 0.0
	for i, t := range top {
		lp := float64(t.val) - float64(m) - lz
		p := math.Exp(lp)
		if i > 0 && float32(p) == 0 {
			break // torch's −p·log p is NaN where p underflows float32: the mask ends
		}
		cum -= p * lp
		if i > 0 {
			if float32(cum) > tau {
				break
			}
			n = i + 1
		}
	}
	s.keepSorted(top[:n])
}
