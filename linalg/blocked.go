package linalg

import (
	"fmt"
	"math"
	"math/bits"
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
	// kc bounds the K slice in packed steps (k values, or k pairs for the
	// bf16-pair kernels): a 32-wide W micro-panel of 512 steps is 64 KiB
	// either way, reused against every row panel of an x group.
	kc int
	// mc bounds the rows of x packed at once (mc·kc values, 4 MiB of
	// float32 at 2048×512); it only caps the packing buffer.
	mc int
	// l2Bytes bounds the packed x rows one work item reuses from its
	// core's L2 against each W micro-panel (0: no bound, one group of all
	// rows). With more than one group, W is packed once into a block that
	// the items share; with one, each item packs its own micro-panels.
	l2Bytes int
	// ncBytes bounds the packed W block of one round (the columns of a K
	// slice that are packed, then multiplied, between two barriers).
	ncBytes int
	// gemvMaxM caps the M that takes the streaming path; below the cap the
	// kernel's own maxM decides (unless a test forces the kernel).
	gemvMaxM int
	// minParallel is the FMA count below which one goroutine is cheaper
	// than starting more.
	minParallel int
}

// defaultBlocking was tuned on a 2-core Zen 5 (48 KiB L1d and 1 MiB L2 per
// core, 32 MiB shared L3); see docs/perf-linalg.md. The float32 kernels
// take x in one group: a widened W micro-panel is twice its bf16 source,
// so packing it where it is used, in L1/L2, beats sharing a packed block
// through L3 (7% at 512×5120×10240).
var defaultBlocking = blocking{kc: 512, mc: 2048, ncBytes: 8 << 20, gemvMaxM: 8, minParallel: 1 << 17}

// bf16DotBlocking is BlockedBF16Dot's: x groups of 256 KiB, W shared
// through L3 (12–20% over one group at 2048×5120×10240 on the Zen 5).
var bf16DotBlocking = blocking{kc: 512, mc: 2048, l2Bytes: 256 << 10, ncBytes: 8 << 20, minParallel: 1 << 17}

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

// runGemm is the blocked path. For each block of at most blk.mc rows, each
// K slice of at most blk.kc steps and each block of W columns that fits
// blk.ncBytes packed, the goroutines first pack the x rows (with the first
// W block of the slice), one k-major panel per mr rows, and, where x is
// split into groups, the W block. Then they take work items, a group of
// row panels and a run of W micro-panels, and run the micro-kernel down
// the group for each micro-panel, packing it first where W is not shared.
// The x group stays in the core's L2 and the W micro-panel in L1/L2 while
// the tiles stream past; the first K slice writes y, later ones add.
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
	kc := ceilDiv(k, ceilDiv(k, blk.kc*ks))
	kc = ceilDiv(kc, ks) * ks // whole pairs, so every K slice but the last is even
	kuMax := kc / ks          // packed steps of a full slice: 4 bytes each
	mc := min(m, blk.mc)
	mc = ceilDiv(m, ceilDiv(m, mc)) // equal blocks rather than a ragged last one
	colPanels := ceilDiv(n, nr)
	// W block: whole micro-panels within ncBytes, equal blocks.
	blockPanels := max(1, min(colPanels, blk.ncBytes/(4*kuMax*nr)))
	blockPanels = ceilDiv(colPanels, ceilDiv(colPanels, blockPanels))
	groupPanels := math.MaxInt
	if blk.l2Bytes > 0 {
		groupPanels = max(1, blk.l2Bytes/(4*kuMax*mr))
	}

	aBuf := getBuf(ceilDiv(mc, mr) * mr * kuMax)
	defer putBuf(aBuf)
	a := *aBuf
	var bShared []float32 // the shared W block, taken when first needed
	defer func() {
		if bShared != nil {
			putBuf(&bShared)
		}
	}()
	bOwn := make([]*[]float32, threads) // each worker's micro-panel, when W is not shared
	defer func() {
		for _, p := range bOwn {
			if p != nil {
				putBuf(p)
			}
		}
	}()

	for i0 := 0; i0 < m; i0 += mc {
		rows := min(mc, m-i0)
		rowPanels := ceilDiv(rows, mr)
		groups0 := ceilDiv(rowPanels, min(groupPanels, rowPanels))
		// One group and panels enough for every goroutine: each item is
		// one micro-panel that its goroutine packs, all of W in one round
		// (no barrier between W blocks). Otherwise W is shared.
		shareW := groups0 > 1 || colPanels < 4*threads
		roundPanels := blockPanels
		if !shareW {
			roundPanels = colPanels
		} else if bShared == nil {
			bShared = *getBuf(blockPanels * kuMax * nr)
		}
		for k0 := 0; k0 < k; k0 += kc {
			kb := min(kc, k-k0)
			ku := ceilDiv(kb, ks) // packed steps in this slice
			acc := k0 > 0
			for c0 := 0; c0 < colPanels; c0 += roundPanels {
				cn := min(roundPanels, colPanels-c0)
				// Items: groups of row panels (within l2Bytes) × runs of
				// micro-panels, a run long enough to pay for loading its
				// group; rows are split further where items are too few.
				groups, runs := 1, cn
				if shareW {
					groups = groups0
					runs = max(1, min(cn/8, ceilDiv(4*threads, groups)))
					if groups*runs < 4*threads {
						groups = min(rowPanels, ceilDiv(4*threads, runs))
					}
				}
				gp := ceilDiv(rowPanels, groups)
				groups = ceilDiv(rowPanels, gp)
				rp := ceilDiv(cn, runs)
				runs = ceilDiv(cn, rp)

				packX, packW := 0, 0
				if c0 == 0 {
					packX = rowPanels
				}
				if shareW {
					packW = cn
				}
				if packX+packW > 0 {
					parallel.For(packX+packW, 1, threads, func(_, lo, hi int) {
						for p := lo; p < hi; p++ {
							if p < packX {
								r := min(mr, rows-p*mr)
								pA(a[p*mr*ku:], x, k, i0+p*mr, r, k0, kb)
								continue
							}
							c := c0 + p - packX
							pB(bShared[(c-c0)*ku*nr:], w, nr, c*nr, min(nr, n-c*nr), k0, kb)
						}
					})
				}
				parallel.For(groups*runs, 1, threads, func(t, lo, hi int) {
					for it := lo; it < hi; it++ {
						g, r := it/runs, it%runs
						p0, p1 := g*gp, min(rowPanels, (g+1)*gp)
						for c := r * rp; c < min(cn, (r+1)*rp); c++ {
							col := (c0 + c) * nr
							cols := min(nr, n-col)
							var bp []float32
							if shareW {
								bp = bShared[c*ku*nr:]
							} else {
								if bOwn[t] == nil {
									bOwn[t] = getBuf(kuMax * nr)
								}
								bp = *bOwn[t]
								pB(bp, w, nr, col, cols, k0, kb)
							}
							for p := p0; p < p1; p++ {
								rr := min(mr, rows-p*mr)
								gk.tile(ku, a[p*mr*ku:], bp, y[(i0+p*mr)*n+col:], n, rr, cols, acc)
							}
						}
					}
				})
			}
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// bufPools recycle packing buffers between calls (and between concurrent
// callers: each call takes its own), one pool per power-of-two size, so a
// call that needs an 8 MiB W block and one that needs a 64 KiB panel do not
// keep trading each other's buffers for fresh, zeroed allocations.
var bufPools [48]sync.Pool

func getBuf(n int) *[]float32 {
	c := bits.Len(uint(max(n, 1) - 1)) // 1<<c ≥ n
	if p, ok := bufPools[c].Get().(*[]float32); ok {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n, 1<<c)
	return &s
}

func putBuf(p *[]float32) {
	c := bits.Len(uint(cap(*p) - 1))
	if cap(*p) == 1<<c && c < len(bufPools) {
		bufPools[c].Put(p)
	}
}
