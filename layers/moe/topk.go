package moe

// torch.topk on the CPU (ATen's TopKImpl.h) does not define an order for
// equal values: it fills a queue of (value, index) pairs in index order and
// runs the C++ standard library's selection on it, std::partial_sort when
// k·64 ≤ n, else std::nth_element at k−1 followed by std::sort of the first
// k−1 entries, all with the comparator "x larger, or x NaN and y not" (NaN
// counts as the largest, for numpy compatibility). Which of two tied experts
// wins therefore depends on where the algorithm's pivots fall. transformers
// routes with torch.topk, so to choose the experts it chooses on an exact
// tie, this file runs the same selection steps as GNU libstdc++ (the
// library of the Linux torch wheels), written from that library's
// documented algorithm: introselect with a median-of-three pivot and an
// insertion sort below four elements, a binary heap for partial_sort, and
// introsort with a final insertion sort above sixteen.

type pair struct {
	v   float32
	idx int32
}

// before is the comparator: x goes before y.
func before(x, y pair) bool {
	xn, yn := x.v != x.v, y.v != y.v
	return (xn && !yn) || x.v > y.v
}

// torchTopK writes the len(idx) experts torch.topk(p, k) returns, in its
// order, and their values.
func torchTopK(idx []int32, w, p []float32) {
	k := len(idx)
	q := make([]pair, len(p))
	for i, v := range p {
		q[i] = pair{v, int32(i)}
	}
	if k*64 <= len(q) {
		partialSort(q, k)
	} else {
		nthElement(q, k-1)
		sortPairs(q[:k-1])
	}
	for j := 0; j < k; j++ {
		idx[j], w[j] = q[j].idx, q[j].v
	}
}

// lg is ⌊log₂ n⌋ for n ≥ 1.
func lg(n int) int {
	r := -1
	for ; n > 0; n >>= 1 {
		r++
	}
	return r
}

// nthElement puts the element that belongs at position nth there, the
// ones before it first (std::nth_element's introselect).
func nthElement(q []pair, nth int) {
	if nth >= len(q) {
		return
	}
	first, last := 0, len(q)
	depth := 2 * lg(last-first)
	for last-first > 3 {
		if depth == 0 {
			heapSelect(q[first:last], nth+1-first)
			q[first], q[nth] = q[nth], q[first]
			return
		}
		depth--
		cut := partitionPivot(q, first, last)
		if cut <= nth {
			first = cut
		} else {
			last = cut
		}
	}
	insertionSort(q[first:last])
}

// partitionPivot moves the median of q[first+1], q[mid], q[last-1] to
// q[first] and partitions the rest around it; it returns the cut.
func partitionPivot(q []pair, first, last int) int {
	mid := first + (last-first)/2
	moveMedianToFirst(q, first, first+1, mid, last-1)
	return unguardedPartition(q, first+1, last, first)
}

func moveMedianToFirst(q []pair, result, a, b, c int) {
	switch {
	case before(q[a], q[b]):
		switch {
		case before(q[b], q[c]):
			q[result], q[b] = q[b], q[result]
		case before(q[a], q[c]):
			q[result], q[c] = q[c], q[result]
		default:
			q[result], q[a] = q[a], q[result]
		}
	case before(q[a], q[c]):
		q[result], q[a] = q[a], q[result]
	case before(q[b], q[c]):
		q[result], q[c] = q[c], q[result]
	default:
		q[result], q[b] = q[b], q[result]
	}
}

func unguardedPartition(q []pair, first, last, pivot int) int {
	for {
		for before(q[first], q[pivot]) {
			first++
		}
		last--
		for before(q[pivot], q[last]) {
			last--
		}
		if first >= last {
			return first
		}
		q[first], q[last] = q[last], q[first]
		first++
	}
}

func insertionSort(q []pair) {
	for i := 1; i < len(q); i++ {
		if before(q[i], q[0]) {
			v := q[i]
			copy(q[1:i+1], q[:i])
			q[0] = v
		} else {
			unguardedLinearInsert(q, i)
		}
	}
}

func unguardedLinearInsert(q []pair, last int) {
	v := q[last]
	for before(v, q[last-1]) {
		q[last] = q[last-1]
		last--
	}
	q[last] = v
}

// sortPairs is std::sort: introsort down to runs of sixteen, then one
// insertion sort (guarded for the first sixteen elements).
func sortPairs(q []pair) {
	if len(q) < 2 {
		return
	}
	introsortLoop(q, 0, len(q), 2*lg(len(q)))
	if len(q) > 16 {
		insertionSort(q[:16])
		for i := 16; i < len(q); i++ {
			unguardedLinearInsert(q, i)
		}
	} else {
		insertionSort(q)
	}
}

func introsortLoop(q []pair, first, last, depth int) {
	for last-first > 16 {
		if depth == 0 {
			partialSort(q[first:last], last-first)
			return
		}
		depth--
		cut := partitionPivot(q, first, last)
		introsortLoop(q, cut, last, depth)
		last = cut
	}
}

// partialSort is std::partial_sort: the first m elements in order, through
// a heap of the m best (heapSelect) that is then sorted.
func partialSort(q []pair, m int) {
	heapSelect(q, m)
	for end := m; end > 1; {
		end--
		popHeap(q, end, end)
	}
}

// heapSelect makes q[:m] a heap of the m elements that go first.
func heapSelect(q []pair, m int) {
	makeHeap(q[:m])
	for i := m; i < len(q); i++ {
		if before(q[i], q[0]) {
			popHeap(q, m, i)
		}
	}
}

func makeHeap(h []pair) {
	n := len(h)
	if n < 2 {
		return
	}
	for parent := (n - 2) / 2; ; parent-- {
		adjustHeap(h, parent, n, h[parent])
		if parent == 0 {
			return
		}
	}
}

// popHeap moves the top of the heap q[:n] to q[result] (result ≥ n-1,
// outside the heap or its last slot) and puts the old q[result] into it.
func popHeap(q []pair, n, result int) {
	v := q[result]
	q[result] = q[0]
	adjustHeap(q[:n], 0, n, v)
}

func adjustHeap(h []pair, hole, n int, v pair) {
	top := hole
	child := hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if before(h[child], h[child-1]) {
			child--
		}
		h[hole] = h[child]
		hole = child
	}
	if n&1 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		h[hole] = h[child-1]
		hole = child - 1
	}
	parent := (hole - 1) / 2
	for hole > top && before(h[parent], v) {
		h[hole] = h[parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	h[hole] = v
}
