package linalg

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/qwenref/qwenref/tensor"
)

// Blocked is the fast product: a cache-blocked, packed GEMM run on several
// goroutines. bf16 weights stay bf16 in memory and are widened exactly to
// float32 while a panel is packed, so the result is the float32 product of
// the widened weights; it differs from Naive only in summation order.
//
// For M ≤ 4 (decode) it skips packing and streams each weight row once,
// parallel over N. Otherwise it packs a K-slice of x once per slice and
// shares it between goroutines, while each goroutine packs the 32-column
// panels of W that it owns just before using them.
//
// The zero value is ready to use and safe for concurrent calls.
type Blocked struct {
	// Threads caps the goroutines one call uses; 0 means runtime.GOMAXPROCS.
	Threads int

	gemm *gemmKernel // nil: the best kernel this CPU runs
	gemv *gemvKernel // nil: likewise
	blk  *blocking   // nil: defaultBlocking
}

// blocking holds the tile sizes of one call. Tests shrink them so that
// small shapes cross every block edge.
type blocking struct {
	// kc bounds the K slice: one 32-wide W panel of kc floats (64 KiB at
	// 512) is reused against every packed row panel of x.
	kc int
	// mc bounds the rows of x packed at once (mc·kc floats, 4 MiB at
	// 2048×512), so the shared x block stays in L3.
	mc int
	// gemvMaxM is the largest M that takes the streaming path.
	gemvMaxM int
	// minParallel is the FMA count below which one goroutine is cheaper
	// than starting more.
	minParallel int
}

// defaultBlocking was tuned on a 2-core Zen 5 (48 KiB L1d and 1 MiB L2 per
// core, 32 MiB shared L3); see docs/perf-linalg.md.
var defaultBlocking = blocking{kc: 512, mc: 2048, gemvMaxM: 2, minParallel: 1 << 17}

// MatMulT implements MatMuler.
func (b Blocked) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	blk := &defaultBlocking
	if b.blk != nil {
		blk = b.blk
	}
	threads, done, err := prologue(y, x, m, w, b.Threads, blk)
	if done || err != nil {
		return err
	}
	if m <= blk.gemvMaxM {
		gv := b.gemv
		if gv == nil {
			gv = gemvKernels[0]
		}
		runGemv(gv, y, x, m, w, threads)
		return nil
	}
	gk := b.gemm
	if gk == nil {
		gk = gemmKernels[0]
	}
	runGemm(gk, blk, y, x, m, w, threads)
	return nil
}

// prologue checks the operands, settles the empty cases (done: y is final)
// and picks the goroutine count.
func prologue(y, x []float32, m int, w *tensor.Matrix, threads int, blk *blocking) (int, bool, error) {
	if err := CheckDims(y, x, m, w); err != nil {
		return 0, true, err
	}
	n, k := w.Rows, w.Cols
	if (w.BF16 == nil && len(w.F32) != n*k) || (w.BF16 != nil && len(w.BF16) != n*k) {
		return 0, true, fmt.Errorf("linalg: weight [%d,%d] holds %d float32 and %d bf16 values", n, k, len(w.F32), len(w.BF16))
	}
	if m == 0 || n == 0 {
		return 0, true, nil
	}
	if k == 0 {
		clear(y)
		return 0, true, nil
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if m*n*k < blk.minParallel {
		threads = 1
	}
	return threads, false, nil
}

// runGemv splits the rows of W (columns of y) evenly between goroutines.
func runGemv(gv *gemvKernel, y, x []float32, m int, w *tensor.Matrix, threads int) {
	n, k := w.Rows, w.Cols
	const align = 16 // rows per unit, so no two goroutines write one cache line of y
	units := (n + align - 1) / align
	threads = min(threads, units)
	parallelFor(threads, func(t int) {
		r0 := units * t / threads * align
		r1 := min(n, units*(t+1)/threads*align)
		if r0 >= r1 {
			return
		}
		if w.BF16 != nil {
			gv.bf16(y[r0:], n, x, m, k, w.BF16[r0*k:r1*k])
		} else {
			gv.f32(y[r0:], n, x, m, k, w.F32[r0*k:r1*k])
		}
	})
}

// runGemm is the blocked path. For each block of at most blk.mc rows and
// each K slice of at most blk.kc, the goroutines first pack the x block together
// (one k-major panel per mr rows), then each walks its own range of nr-wide
// column panels: pack the W panel (widening bf16), then run the micro-kernel
// down every row panel. The W panel stays in L1/L2 while the packed x block
// streams past it from L3, and the first K slice writes y, later ones add.
func runGemm(gk *gemmKernel, blk *blocking, y, x []float32, m int, w *tensor.Matrix, threads int) {
	n, k := w.Rows, w.Cols
	mr, nr, ks := gk.mr, gk.nr, max(1, gk.kstep)
	pA, pB := gk.packA, gk.packB
	if pA == nil {
		pA = packA
	}
	if pB == nil {
		pB = packB
	}
	kc := ceilDiv(k, ceilDiv(k, blk.kc))
	kc = ceilDiv(kc, ks) * ks // whole pairs, so every K slice but the last is even
	mc := min(m, blk.mc)
	mc = ceilDiv(m, ceilDiv(m, mc)) // equal blocks rather than a ragged last one
	colPanels := ceilDiv(n, nr)

	aBuf := getBuf(ceilDiv(mc, mr) * mr * kc)
	defer putBuf(aBuf)
	bBufs := make([]*[]float32, threads)
	for t := range bBufs {
		bBufs[t] = getBuf(kc * nr)
	}
	defer func() {
		for _, p := range bBufs {
			putBuf(p)
		}
	}()
	a := *aBuf

	for i0 := 0; i0 < m; i0 += mc {
		rows := min(mc, m-i0)
		rowPanels := ceilDiv(rows, mr)
		// Split the columns between goroutines when there are enough of
		// them (no work is repeated); otherwise split the rows, and each
		// goroutine packs every W panel for itself.
		byCols := colPanels >= 2*threads || rowPanels < threads
		for k0 := 0; k0 < k; k0 += kc {
			kb := min(kc, k-k0)
			ku := ceilDiv(kb, ks) // packed steps in this slice
			acc := k0 > 0
			parallelFor(min(threads, rowPanels), func(t int) {
				p0, p1 := split(rowPanels, min(threads, rowPanels), t)
				for p := p0; p < p1; p++ {
					r := min(mr, rows-p*mr)
					pA(a[p*mr*ku:], x, k, i0+p*mr, r, k0, kb)
				}
			})
			parallelFor(threads, func(t int) {
				c0, c1, q0, q1 := 0, colPanels, 0, rowPanels
				if byCols {
					c0, c1 = split(colPanels, threads, t)
				} else {
					q0, q1 = split(rowPanels, threads, t)
				}
				bp := *bBufs[t]
				for c := c0; c < c1; c++ {
					cols := min(nr, n-c*nr)
					pB(bp, w, nr, c*nr, cols, k0, kb)
					for p := q0; p < q1; p++ {
						r := min(mr, rows-p*mr)
						off := (i0+p*mr)*n + c*nr
						gk.tile(ku, a[p*mr*ku:], bp, y[off:], n, r, cols, acc)
					}
				}
			})
		}
	}
}

// split returns the t-th of `parts` near-equal ranges of [0, total).
func split(total, parts, t int) (int, int) {
	return total * t / parts, total * (t + 1) / parts
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// parallelFor runs f(0…threads-1), f(0) on the calling goroutine.
func parallelFor(threads int, f func(t int)) {
	if threads <= 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	wg.Add(threads - 1)
	for t := 1; t < threads; t++ {
		go func() {
			defer wg.Done()
			f(t)
		}()
	}
	f(0)
	wg.Wait()
}

// bufPool recycles packing buffers between calls (and between concurrent
// callers: each call takes its own).
var bufPool sync.Pool

func getBuf(n int) *[]float32 {
	if p, ok := bufPool.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n)
	return &s
}

func putBuf(p *[]float32) { bufPool.Put(p) }
