package linalg

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/tensor"
)

// Blocked is the fast product: a cache-blocked, packed GEMM run on several
// goroutines. bf16 weights stay bf16 in memory and are widened exactly to
// float32 while a panel is packed, so the result is the float32 product of
// the widened weights; it differs from Naive only in summation order.
//
// For small M (decode) it skips packing and streams each weight row from
// memory once, parallel over N. Otherwise it packs a K slice of x once and
// shares it between goroutines, which take column panels of W, pack them
// (widening bf16) and run the micro-kernel down all rows. The kernels are
// those of the level internal/cpu selects (KernelInfo names them):
// AVX-512 assembly (14×32 tile, GEMV up to M = 6), AVX2+FMA assembly
// (6×16, GEMV up to M = 8), NEON assembly (8×12, GEMV up to M = 8), or
// portable Go (4×2).
//
// Results do not depend on the thread count: each output's summation order
// is fixed by the kernel and the blocking. The zero value is ready to use
// and safe for concurrent calls.
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
	// gemvMaxM caps the M that takes the streaming path; below the cap the
	// kernel's own maxM decides (unless a test forces the kernel).
	gemvMaxM int
	// minParallel is the FMA count below which one goroutine is cheaper
	// than starting more.
	minParallel int
}

// defaultBlocking was tuned on a 2-core Zen 5 (48 KiB L1d and 1 MiB L2 per
// core, 32 MiB shared L3); see docs/perf-linalg.md.
var defaultBlocking = blocking{kc: 512, mc: 2048, gemvMaxM: 8, minParallel: 1 << 17}

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
	gk, gv := b.gemm, b.gemv
	if gk == nil {
		gk = gemmKernels[0]
	}
	maxM := blk.gemvMaxM
	if gv == nil {
		gv = gemvKernels[0]
		maxM = min(maxM, gv.maxM)
		// The portable streaming kernel is slower than packing for a SIMD
		// GEMM kernel (AVX-512 builds without GOEXPERIMENT=simd).
		if gv.prio == 0 && gk.prio > 0 {
			maxM = 0
		}
	}
	if m <= maxM {
		runGemv(gv, y, x, m, w, threads)
		return nil
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

// runGemv hands out blocks of W rows (columns of y) to the goroutines as
// they come free, so a goroutine that the OS parks on a shared machine
// does not hold up the others.
func runGemv(gv *gemvKernel, y, x []float32, m int, w *tensor.Matrix, threads int) {
	n, k := w.Rows, w.Cols
	// 64 rows per grab (a multiple of 16, so no two goroutines share a
	// cache line of y): 320 KiB of float32 W at K=1280, plenty per atomic.
	const rowsPerGrab = 64
	parallel.For(ceilDiv(n, rowsPerGrab), 1, threads, func(_, lo, hi int) {
		r0, r1 := lo*rowsPerGrab, min(n, hi*rowsPerGrab)
		if w.BF16 != nil {
			gv.bf16(y[r0:], n, x, m, k, w.BF16[r0*k:r1*k])
		} else {
			gv.f32(y[r0:], n, x, m, k, w.F32[r0*k:r1*k])
		}
	})
}

// runGemm is the blocked path. For each block of at most blk.mc rows and
// each K slice of at most blk.kc, the goroutines first pack the x block
// together (one k-major panel per mr rows), then take nr-wide column panels
// one at a time: pack the W panel (widening bf16) and run the micro-kernel
// down every row panel. The W panel stays in L1/L2 while the packed x block
// streams past it from L3, and the first K slice writes y, later ones add.
// When W has too few panels to share out, all of them are packed in the
// first phase and the goroutines take groups of row panels instead.
//
// Work is handed out dynamically (internal/parallel), which keeps both cores
// busy when the machine is shared, and the result bit-identical whatever
// the split: every tile sees the same kernel calls in the same K order.
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
	// Share out column panels when there are enough of them; otherwise
	// pack W once per slice and share out row panels.
	byCols := colPanels >= 4*threads

	aBuf := getBuf(ceilDiv(mc, mr) * mr * kc)
	defer putBuf(aBuf)
	a := *aBuf
	var bShared []float32
	bBufs := make([]*[]float32, threads)
	if byCols {
		for t := range bBufs {
			bBufs[t] = getBuf(kc * nr)
			defer putBuf(bBufs[t])
		}
	} else {
		p := getBuf(colPanels * kc * nr)
		defer putBuf(p)
		bShared = *p
	}

	for i0 := 0; i0 < m; i0 += mc {
		rows := min(mc, m-i0)
		rowPanels := ceilDiv(rows, mr)
		for k0 := 0; k0 < k; k0 += kc {
			kb := min(kc, k-k0)
			ku := ceilDiv(kb, ks) // packed steps in this slice
			acc := k0 > 0
			packItems := rowPanels
			if !byCols {
				packItems += colPanels // all of this K slice of W
			}
			parallel.For(packItems, 1, threads, func(_, lo, hi int) {
				for p := lo; p < hi; p++ {
					if p < rowPanels {
						r := min(mr, rows-p*mr)
						pA(a[p*mr*ku:], x, k, i0+p*mr, r, k0, kb)
						continue
					}
					c := p - rowPanels
					pB(bShared[c*ku*nr:], w, nr, c*nr, min(nr, n-c*nr), k0, kb)
				}
			})
			if byCols {
				parallel.For(colPanels, 1, threads, func(t, lo, hi int) {
					bp := *bBufs[t]
					for c := lo; c < hi; c++ {
						cols := min(nr, n-c*nr)
						pB(bp, w, nr, c*nr, cols, k0, kb)
						for p := 0; p < rowPanels; p++ {
							r := min(mr, rows-p*mr)
							gk.tile(ku, a[p*mr*ku:], bp, y[(i0+p*mr)*n+c*nr:], n, r, cols, acc)
						}
					}
				})
				continue
			}
			parallel.For(rowPanels, 4, threads, func(_, lo, hi int) {
				for c := 0; c < colPanels; c++ {
					cols := min(nr, n-c*nr)
					for p := lo; p < hi; p++ {
						r := min(mr, rows-p*mr)
						gk.tile(ku, a[p*mr*ku:], bShared[c*ku*nr:], y[(i0+p*mr)*n+c*nr:], n, r, cols, acc)
					}
				}
			})
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

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
