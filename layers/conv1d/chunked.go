package conv1d

import (
	"sync"

	"github.com/qwenref/qwenref/internal/parallel"
)

// The assembly of every architecture is generated on any host.
//go:generate go run github.com/qwenref/qwenref/internal/kernelgen layers/conv1d

// Chunked is the fast convolution: one streaming pass over time, SIMD over
// channels, with the rows shared out among GOMAXPROCS workers in
// contiguous time ranges. Rows are independent given the inputs (y[t]
// reads x[t−K+1..t], never an earlier y), so only the final state update
// waits for all workers. It handles any T, including T = 1 (the decode
// update), with the same code.
//
// The taps are first copied tap-major (wt[j][c], so tap j is a contiguous
// vector over channels). Each worker then sweeps its rows whole, four at a
// time where it can (each input vector feeds all four outputs it touches),
// so every x value comes from memory once. Each output is summed in the
// same order as Naive's (w0·m0 + w1·m1 + …), which keeps the two within
// rounding of each other.
//
// y must not overlap x or state.
type Chunked struct{}

// minOutputsPerWorker keeps a worker's share above about 32K outputs:
// handing out a piece costs about a microsecond.
const minOutputsPerWorker = 1 << 15

// tapBufs recycles the tap buffers between calls, so that the decode
// update (T = 1) does not allocate.
var tapBufs = sync.Pool{New: func() any { return new([]float32) }}

// Forward implements Kernel.
func (Chunked) Forward(y, x, w []float32, d Dims, state []float32) error {
	if err := d.Check(y, x, w, state); err != nil {
		return err
	}
	t, c, k := d.T, d.C, d.K
	if t == 0 {
		return nil // no tokens: no outputs, and the state is unchanged
	}
	buf := getBuf(k * c)
	wt := *buf
	transposeTaps(wt, w, k, c)

	// Contiguous time ranges, one per worker, whole multiples of four rows
	// so the four-row kernel covers as much as it can.
	workers := parallel.Workers(max(1, t*c/minOutputsPerWorker), 0)
	span := ((t+workers-1)/workers + 3) &^ 3
	parallel.For(t, span, workers, func(_, lo, hi int) {
		convRows(y, x, lo, hi, c, wt, k, state)
	})
	tapBufs.Put(buf)

	// state ← last K rows of [state; x]. When the source is the old state
	// (T < K), it is row T+i > i, so walking i upwards never reads a row
	// that this loop has already overwritten.
	for i := range k {
		if tau := t - k + i; tau < 0 {
			copy(state[i*c:(i+1)*c], state[(k+tau)*c:(k+tau+1)*c])
		} else {
			copy(state[i*c:(i+1)*c], x[tau*c:(tau+1)*c])
		}
	}
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

// convRows computes output rows [ta, tb) over all channels, reading the
// state for inputs before time 0. wt holds the taps tap-major. Rows are
// swept whole: long contiguous runs are what the hardware prefetchers
// follow best (1024-channel tiles that revisit L1 measured 16–34% more
// CPU), and the previous rows and the taps stay in L2.
func convRows(y, x []float32, ta, tb, c int, wt []float32, k int, state []float32) {
	// row returns the input at time tau (state row K+tau when tau < 0, as
	// in Naive).
	row := func(tau int) []float32 {
		if tau < 0 {
			return state[(k+tau)*c : (k+tau+1)*c]
		}
		return x[tau*c : (tau+1)*c]
	}
	var small [8][]float32
	rows := small[:0]
	if k > len(small) {
		rows = make([][]float32, 0, k)
	}
	rows = rows[:k]
	for ti := ta; ti < tb; {
		if k == 4 && ti >= 3 && ti+4 <= tb {
			// Four rows at once, all inputs inside x.
			kern.rows4x4(y[ti*c:(ti+4)*c], x[(ti-3)*c:(ti+4)*c], c, wt)
			ti += 4
			continue
		}
		yr := y[ti*c : (ti+1)*c]
		if k == 4 {
			// The Qwen3.5 case: the rows and taps are passed as separate
			// slices, since the first inputs may come from the state.
			kern.row4(yr, row(ti-3), row(ti-2), row(ti-1), row(ti), wt[:c], wt[c:2*c], wt[2*c:3*c], wt[3*c:])
		} else {
			for j := range k {
				rows[j] = row(ti - (k - 1) + j)
			}
			convRowK(yr, rows, wt, c)
		}
		ti++
	}
}
