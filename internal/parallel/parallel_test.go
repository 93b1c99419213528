package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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

// spinWork is a fixed amount of arithmetic, about 0.1 ms on one core.
func spinWork(n int) float64 {
	s := 1.0
	for i := range n {
		s = s*1.0000001 + float64(i&7)
	}
	return s
}

// BenchmarkLoopOfShortPieces times what a layer does many times over: one
// loop of GOMAXPROCS pieces of about 0.1 ms each, back to back. "parked"
// makes every helper park between loops (SetSpin(0)), so each loop pays
// for waking them; "polling" is the default. ideal-ms is one piece's time.
//
//	GOMAXPROCS=16 go test ./internal/parallel -run '^$' -bench LoopOfShortPieces
func BenchmarkLoopOfShortPieces(b *testing.B) {
	const work = 100_000
	t0 := time.Now()
	sink := spinWork(work)
	ideal := time.Since(t0)
	for _, c := range []struct {
		name string
		spin time.Duration
	}{{"parked", 0}, {"polling", DefaultSpin}} {
		b.Run(c.name, func(b *testing.B) {
			defer SetSpin(SetSpin(c.spin))
			n := runtime.GOMAXPROCS(0)
			out := make([]float64, n*8)
			for b.Loop() {
				Each(n, 0, func(_, i int) { out[i*8] = spinWork(work) })
			}
			sink += out[0]
			b.ReportMetric(float64(ideal.Microseconds())/1000, "ideal-ms")
		})
	}
	_ = sink
}

// TestForNestedAndConcurrent: a loop inside a loop's body, and loops from
// several goroutines at once, find the pool taken and start goroutines of
// their own; every index must still run exactly once.
func TestForNestedAndConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const outer, inner = 13, 37
	var hits [outer * inner]atomic.Int32
	done := make(chan bool)
	for c := range 3 {
		go func() {
			For(outer, 1, 0, func(_, lo, hi int) {
				for i := lo; i < hi; i++ {
					For(inner, 2, 0, func(_, a, b int) {
						for j := a; j < b; j++ {
							if c == 0 {
								hits[i*inner+j].Add(1)
							}
						}
					})
				}
			})
			done <- true
		}()
	}
	for range 3 {
		<-done
	}
	for i := range hits {
		if n := hits[i].Load(); n != 1 {
			t.Fatalf("index %d ran %d times", i, n)
		}
	}
}

// TestForParkedHelpers: with SetSpin(0) every helper parks between loops
// and must be woken for the next; after GOMAXPROCS shrinks the extra
// helpers stay parked and loops still finish.
func TestForParkedHelpers(t *testing.T) {
	defer SetSpin(SetSpin(0))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(6))
	for _, spin := range []time.Duration{0, time.Millisecond} {
		SetSpin(spin)
		for _, procs := range []int{6, 2, 6} {
			runtime.GOMAXPROCS(procs)
			for range 50 {
				var sum atomic.Int64
				For(100, 1, 0, func(_, lo, hi int) {
					for i := lo; i < hi; i++ {
						sum.Add(int64(i))
					}
				})
				if sum.Load() != 4950 {
					t.Fatalf("spin %v procs %d: sum %d", spin, procs, sum.Load())
				}
			}
		}
	}
}

// TestHelperJoinsEachLoopOnce alternates loops that leave most helpers out
// with loops that need them all. A helper that saw a small loop late must
// not mistake the next big loop for it and join that one twice: two
// goroutines would then run one worker number (each body's per-worker
// scratch shared) and the loop's count would go negative.
func TestHelperJoinsEachLoopOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	var active [16]atomic.Int32
	var twice atomic.Int64
	body := func(w, lo, hi int) {
		if !active[w].CompareAndSwap(0, 1) {
			twice.Add(1)
			return
		}
		for i := lo; i < hi; i++ {
			spinWork(20)
		}
		active[w].Store(0)
	}
	for i := range 20000 {
		For(64, 1, 2+14*(i%2), body)
		if n := twice.Load(); n > 0 {
			t.Fatalf("loop %d: a worker number ran on two goroutines at once (%d times)", i, n)
		}
	}
}
