// Package parallel is the one worker pool of qwenref's CPU kernels: a
// parallel for-loop with dynamic hand-out, where the calling goroutine is
// one of the workers.
//
// The caller works from the start because a woken thread can take tens of
// microseconds to join, which is the whole of a decode step; with dynamic
// hand-out a late helper simply does less. The helpers are persistent
// goroutines that poll for the next loop for a while before they park
// (pool.go), so back-to-back loops do not pay for waking them.
package parallel

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Workers is how many goroutines For uses for n units when capped at
// limit (limit ≤ 0 means GOMAXPROCS): min(limit, n), at least 1.
func Workers(n, limit int) int {
	if limit <= 0 {
		limit = runtime.GOMAXPROCS(0)
	}
	return max(1, min(limit, n))
}

// For runs body(worker, lo, hi) over [0, n) in pieces of grain indices
// (grain < 1 is 1) on Workers(⌈n/grain⌉, limit) goroutines. worker is in
// [0, workers) and is stable for one goroutine, so bodies can index
// per-worker scratch with it. For returns when every piece is done.
func For(n, grain, limit int, body func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(1, grain)
	pieces := (n + grain - 1) / grain
	workers := Workers(pieces, limit)
	if workers == 1 {
		body(0, 0, n)
		return
	}
	var next atomic.Int64
	work := func(w int) {
		for {
			lo := int(next.Add(int64(grain))) - grain
			if lo >= n {
				return
			}
			body(w, lo, min(n, lo+grain))
		}
	}
	var fault atomic.Value // the first memory fault a helper goroutine hit
	helped := workerPool.run(workers, func(w int) {
		if w > 0 {
			defer catchFault(&fault, &next, n)
		}
		work(w)
	})
	if !helped { // the pool is busy (a nested or concurrent loop)
		var wg sync.WaitGroup
		for w := 1; w < workers; w++ {
			wg.Go(func() {
				defer catchFault(&fault, &next, n)
				debug.SetPanicOnFault(true)
				work(w)
			})
		}
		work(0)
		wg.Wait()
	}
	if f := fault.Load(); f != nil {
		panic(f.(faultBox).v)
	}
}

// faultBox holds a recovered fault; atomic.Value needs one concrete type.
type faultBox struct{ v any }

// catchFault turns a memory fault on a helper goroutine (a read of a mapped
// file that was truncated, say) into a panic on the calling goroutine after
// the loop, where a guard such as weights.Store.Guard can report it as an
// error instead of the process dying of SIGBUS. Other panics are left alone.
// The remaining work is abandoned: the counter jumps past the end.
func catchFault(fault *atomic.Value, next *atomic.Int64, n int) {
	r := recover()
	if r == nil {
		return
	}
	if _, ok := r.(interface{ Addr() uintptr }); !ok {
		panic(r)
	}
	next.Store(int64(n))
	fault.CompareAndSwap(nil, faultBox{r})
}

// Each runs body(worker, i) for every i in [0, n), one index at a time, for
// units that are large and may be uneven.
func Each(n, limit int, body func(worker, i int)) {
	For(n, 1, limit, func(w, lo, hi int) {
		for i := lo; i < hi; i++ {
			body(w, i)
		}
	})
}

// RowsMinValues is the least work Rows hands one goroutine: 32K values
// (128 KiB of float32), about 10 µs of a memory-bound pass, well above
// what waking a helper costs.
const RowsMinValues = 1 << 15

// Rows runs body(lo, hi) over the rows [0, rows) of a row-major array of
// rows × width values, in pieces of whole rows of at least RowsMinValues
// values, on up to GOMAXPROCS goroutines: the elementwise passes between
// the products (norms, activations, copies, residual adds), which on one
// thread take a fixed share of a layer however many cores the products
// use. One row, or little work, runs inline on the caller.
func Rows(rows, width int, body func(lo, hi int)) {
	grain := (RowsMinValues + max(width, 1) - 1) / max(width, 1)
	For(rows, grain, 0, func(_, lo, hi int) { body(lo, hi) })
}
