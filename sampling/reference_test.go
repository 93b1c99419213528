package sampling

import (
	"math"
	"slices"
)

// refProcess is a straightforward reference for Sampler.Process: every
// processor over the whole vocabulary, step by step as its transformers
// class (sorting the whole vocabulary where the class sorts; stable sorts,
// so ties go by id), with float64 sums and torch's float32 comparisons. It
// also returns, when top-p is the first truncating warper (the path whose
// normalizer the Sampler takes partly from float32 exponentials), the
// smallest distance of a cumulative probability from the top-p threshold,
// relative to the threshold.
func refProcess(c Config, logits []float32, history []int) ([]float32, float64) {
	s := slices.Clone(logits)
	margin := math.Inf(1)
	if c.penaltyOn() {
		p := float32(c.RepetitionPenalty)
		done := map[int]bool{}
		for _, id := range history {
			if !done[id] {
				done[id] = true
				if x := logits[id]; x < 0 {
					s[id] = x * p
				} else {
					s[id] = x / p
				}
			}
		}
	}
	if !c.DoSample {
		return s, margin
	}
	if c.tempOn() {
		t := float32(c.Temperature)
		for i := range s {
			s[i] /= t
		}
	}
	if c.topHOn() {
		refTopH(s, c.TopH)
	}
	if c.topKOn() {
		refTopK(s, c.TopK)
	}
	if c.topPOn() {
		m := refTopP(s, c.TopP)
		if !c.topHOn() && !c.topKOn() {
			margin = m
		}
	}
	if c.minPOn() {
		probs, _ := refSoftmax(s)
		top := slices.Max(probs)
		for i, p := range probs {
			if p < c.MinP*top {
				s[i] = negInf
			}
		}
	}
	if c.typicalOn() {
		refTypical(s, c.TypicalP)
	}
	if c.epsilonOn() {
		refCutoff(s, float32(c.EpsilonCutoff))
	}
	if c.etaOn() {
		probs, _ := refSoftmax(s)
		var h float64
		for _, p := range probs {
			if p > 0 {
				h -= p * math.Log(p)
			}
		}
		eps := float32(c.EtaCutoff)
		refCutoff(s, min(eps, float32(math.Sqrt(float64(eps)))*float32(math.Exp(-float64(float32(h))))))
	}
	return s, margin
}

// refSoftmax returns float64 probabilities (summed in id order) and the
// maximum.
func refSoftmax(s []float32) ([]float64, float32) {
	m := slices.Max(s)
	p := make([]float64, len(s))
	var z float64
	for i, v := range s {
		p[i] = math.Exp(float64(v) - float64(m))
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	return p, m
}

// ascending returns the ids sorted by score ascending, ties by id.
func ascending(s []float32) []int {
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case s[a] < s[b]:
			return -1
		case s[a] > s[b]:
			return 1
		}
		return 0
	})
	return idx
}

func refTopK(s []float32, k int) {
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	kth := sorted[len(sorted)-min(k, len(s))]
	for i, v := range s {
		if v < kth {
			s[i] = negInf
		}
	}
}

// refTopP sorts ascending, takes the cumulative sum of the softmax, drops
// the tokens whose sum is ≤ 1 − top_p and keeps the last.
func refTopP(s []float32, topP float64) float64 {
	probs, _ := refSoftmax(s)
	idx := ascending(s)
	thr := float32(1 - topP)
	margin := math.Inf(1)
	var cum float64
	drop := make([]bool, len(s))
	for j, i := range idx {
		cum += probs[i]
		drop[j] = float32(cum) <= thr
		if probs[i] > 0 {
			margin = min(margin, math.Abs(cum-float64(thr))/float64(thr))
		}
	}
	drop[len(idx)-1] = false
	for j, i := range idx {
		if drop[j] {
			s[i] = negInf
		}
	}
	return margin
}

func refTypical(s []float32, mass float64) {
	probs, m := refSoftmax(s)
	var z float64
	for _, v := range s {
		z += math.Exp(float64(v) - float64(m))
	}
	lse := float64(m) + math.Log(z)
	var h float64
	for i, v := range s {
		if probs[i] > 0 {
			h += probs[i] * (lse - float64(v))
		}
	}
	dist := make([]float32, len(s))
	for i, v := range s {
		dist[i] = float32(math.Abs(lse - float64(v) - h)) // +Inf for −Inf scores
	}
	idx := ascending(dist)
	var cum float64
	last := 0
	for _, i := range idx {
		cum += probs[i]
		if float32(cum) < float32(mass) {
			last++
		}
	}
	last = min(last, len(idx)-1)
	limit := dist[idx[last]]
	for j, i := range idx {
		if j > 0 && dist[i] > limit {
			s[i] = negInf
		}
	}
}

func refCutoff(s []float32, limit float32) {
	probs, m := refSoftmax(s)
	for i, p := range probs {
		if float32(p) < limit && s[i] < m {
			s[i] = negInf
		}
	}
}

func refTopH(s []float32, topH float64) {
	idx := make([]int, len(s))
	for i := range idx {
		idx[i] = i
	}
	// descending, ties by id ascending, as the Sampler orders them
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case s[a] > s[b]:
			return -1
		case s[a] < s[b]:
			return 1
		}
		return a - b
	})
	top := idx[:min(len(idx), topHCandidates)]
	vals := make([]float32, len(top))
	for j, i := range top {
		vals[j] = s[i]
	}
	probs, _ := refSoftmax(vals)
	var h float64
	for _, p := range probs {
		if p > 0 {
			h -= p * math.Log(p)
		}
	}
	tau := float32(h) * float32(topH)
	keep := map[int]bool{top[0]: true}
	var cum float64
	for j, i := range top {
		if float32(probs[j]) > 0 {
			cum -= probs[j] * math.Log(probs[j])
		} else {
			break // −p log p is NaN at p = 0 (float32) in torch: the mask ends
		}
		if float32(cum) <= tau {
			keep[i] = true
		} else {
			break
		}
	}
	for i := range s {
		if !keep[i] {
			s[i] = negInf
		}
	}
}
