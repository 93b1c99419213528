package parallel

import (
	"sync/atomic"
	"testing"
)

func TestForCoversEveryIndexOnce(t *testing.T) {
	for _, c := range []struct{ n, grain, limit int }{{0, 1, 0}, {1, 1, 0}, {17, 4, 3}, {1000, 7, 0}, {5, 100, 8}, {64, 1, 1}} {
		hits := make([]atomic.Int32, c.n)
		workers := Workers((c.n+max(1, c.grain)-1)/max(1, c.grain), c.limit)
		For(c.n, c.grain, c.limit, func(w, lo, hi int) {
			if w < 0 || w >= workers {
				t.Errorf("worker %d outside [0,%d)", w, workers)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("%+v: index %d run %d times", c, i, h)
			}
		}
	}
}

func TestEach(t *testing.T) {
	var sum atomic.Int64
	Each(100, 0, func(_, i int) { sum.Add(int64(i)) })
	if sum.Load() != 4950 {
		t.Fatalf("sum %d, want 4950", sum.Load())
	}
}
