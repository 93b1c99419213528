package conv1d

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Chunked is the fast convolution: one streaming pass over time, SIMD over
// channels, with channel blocks shared out among GOMAXPROCS workers. It
// handles any T, including T = 1 (the decode update), with the same code.
//
// Each worker copies the taps of its channel block into a tap-major buffer
// (wt[j][c], so tap j is a contiguous vector over channels) and then walks
// the block's rows t = 0..T−1. The K input rows that feed row t were read in
// the previous K−1 steps, so they are still in cache and every x value comes
// from memory once. The sum is formed in the same order as Naive's
// (w0·m0 + w1·m1 + …), which keeps the two within rounding of each other.
//
// y must not overlap x or state.
type Chunked struct{}

const (
	// blockC is the channel width of one work item. With K = 4 a block's
	// four live input rows and taps take 2·4·blockC·4 B = 32 KiB, which stays
	// in a Zen 4 core's 48 KiB L1 while its rows stream from memory.
	blockC = 1024
	// minParallel is the number of outputs below which one goroutine does
	// all the work: starting a second costs about a microsecond.
	minParallel = 1 << 15
)

// tapBufs recycles the per-worker tap buffers between calls, so that the
// decode update (T = 1) does not allocate.
var tapBufs = sync.Pool{New: func() any { return new([]float32) }}

// Forward implements Kernel.
func (Chunked) Forward(y, x []float32, t, c int, w []float32, k int, state []float32) error {
	if err := CheckDims(y, x, t, c, w, k, state); err != nil {
		return err
	}
	if t == 0 {
		return nil // no tokens: no outputs, and the state is unchanged
	}
	nb := (c + blockC - 1) / blockC
	workers := min(runtime.GOMAXPROCS(0), nb, max(1, t*c/minParallel))
	if workers == 1 {
		buf := getBuf(k * min(c, blockC))
		for b := range nb {
			convBlock(y, x, t, c, w, k, state, b*blockC, min(c, (b+1)*blockC), *buf)
		}
		tapBufs.Put(buf)
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			buf := getBuf(k * blockC)
			for b := int(next.Add(1) - 1); b < nb; b = int(next.Add(1) - 1) {
				convBlock(y, x, t, c, w, k, state, b*blockC, min(c, (b+1)*blockC), *buf)
			}
			tapBufs.Put(buf)
		})
	}
	wg.Wait()
	return nil
}

// getBuf returns a pooled buffer of at least n values.
func getBuf(n int) *[]float32 {
	p := tapBufs.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// convBlock runs channels [lo, hi) over all T rows and then updates their
// state columns. buf holds at least K·(hi−lo) values.
func convBlock(y, x []float32, t, c int, w []float32, k int, state []float32, lo, hi int, buf []float32) {
	n := hi - lo
	wt := buf[:k*n]
	transposeTaps(wt, w[lo*k:hi*k], k, n)

	// row returns channels [lo, hi) of the input at time tau (state row
	// K+tau when tau < 0, as in Naive).
	row := func(tau int) []float32 {
		if tau < 0 {
			return state[(k+tau)*c+lo : (k+tau)*c+hi]
		}
		return x[tau*c+lo : tau*c+hi]
	}
	if k == 4 {
		// The Qwen3.5 case, unrolled: the rows and taps are passed as
		// separate slices so the kernel keeps them in registers.
		w0, w1, w2, w3 := wt[:n], wt[n:2*n], wt[2*n:3*n], wt[3*n:]
		for ti := range t {
			convRow4(y[ti*c+lo:ti*c+hi], row(ti-3), row(ti-2), row(ti-1), row(ti), w0, w1, w2, w3)
		}
	} else {
		var small [8][]float32
		rows := small[:0]
		if k > len(small) {
			rows = make([][]float32, 0, k)
		}
		rows = rows[:k]
		for ti := range t {
			for j := range k {
				rows[j] = row(ti - (k - 1) + j)
			}
			convRowK(y[ti*c+lo:ti*c+hi], rows, wt)
		}
	}

	// state ← last K rows of [state; x], for these channels only. When the
	// source is the old state (T < K), it is row T+i > i, so walking i
	// upwards never reads a row that this loop has already overwritten.
	for i := range k {
		copy(state[i*c+lo:i*c+hi], row(t-k+i))
	}
}

// transposeTapsScalar writes wt[j·n+i] = w[i·k+j]: tap-major, so each tap
// is a contiguous vector over the block's channels.
func transposeTapsScalar(wt, w []float32, k, n int) {
	for i := range n {
		for j, v := range w[i*k : (i+1)*k] {
			wt[j*n+i] = v
		}
	}
}
