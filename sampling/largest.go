package sampling

import "slices"

// Largest returns the ids of the k largest values of x, largest first and
// equal values by id, as a stable sort would order them; NaNs are skipped.
// It keeps a k-element heap, so a step of `run --top-probs` costs one pass
// over the vocabulary and no allocation sized by it.
func Largest(x []float32, k int) []int {
	k = min(max(k, 0), len(x))
	if k == 0 {
		return nil
	}
	// h is a min-heap under worse: its root is the kept id to drop next.
	h := make([]int, 0, k)
	worse := func(a, b int) bool { return x[a] < x[b] || (x[a] == x[b] && a > b) }
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < len(h) && worse(h[l], h[m]) {
				m = l
			}
			if r := l + 1; r < len(h) && worse(h[r], h[m]) {
				m = r
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for id, v := range x {
		switch {
		case v != v:
			continue
		case len(h) < k:
			h = append(h, id)
			for i := len(h) - 1; i > 0 && worse(h[i], h[(i-1)/2]); i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
		case worse(h[0], id):
			h[0] = id
			down(0)
		}
	}
	slices.SortFunc(h, func(a, b int) int {
		switch {
		case worse(b, a):
			return -1
		case worse(a, b):
			return 1
		}
		return 0
	})
	return h
}
