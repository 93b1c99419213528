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

// Rows hands out whole rows, each once, in pieces of at least
// RowsMinValues values (the last piece may be shorter), and starts every
// piece at a multiple of its grain, so a vector kernel splits alike on any
// thread count.
func TestRows(t *testing.T) {
	for _, c := range []struct{ rows, width int }{{0, 5}, {1, 1 << 20}, {3, 7}, {100000, 1}, {512, 5120}, {4096, 128}, {7, 0}} {
		hits := make([]atomic.Int32, c.rows)
		grain := (RowsMinValues + max(c.width, 1) - 1) / max(c.width, 1)
		Rows(c.rows, c.width, func(lo, hi int) {
			if lo%grain != 0 {
				t.Errorf("%+v: piece starts at row %d, not a multiple of %d", c, lo, grain)
			}
			if hi != c.rows && (hi-lo)*max(c.width, 1) < RowsMinValues {
				t.Errorf("%+v: piece [%d, %d) is under %d values", c, lo, hi, RowsMinValues)
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("%+v: row %d run %d times", c, i, h)
			}
		}
	}
}
