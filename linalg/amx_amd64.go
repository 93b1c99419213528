package linalg

import (
	"unsafe"

	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/tensor"
)

// amxTileConfig is the LDTILECFG operand: palette 1, all eight tiles 16
// rows of 64 bytes (16 float32 of C, 32 bf16 of A, 16 bf16 pairs of B).
var amxTileConfig = func() (c [64]byte) {
	c[0] = 1
	for t := 0; t < 8; t++ {
		c[16+2*t] = 64
		c[48+t] = 16
	}
	return c
}()

// asU16 views a packing buffer as the bf16 values it holds.
func asU16(s []float32) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

// runAMX packs all of x into bf16 row blocks first (every K slice of
// every row block, shared by the goroutines), then hands out blocks of
// W's columns: a goroutine packs one K slice of its block (bl.nc columns,
// kept in L2) and runs every x row block against it, one kernel call per
// row block, whose slice streams in once (prefetched during the call
// before) and is reused from L1/L2 across the block's panels. With too few
// column blocks to share out, each K slice of all of W is packed together
// and the goroutines take row blocks instead. Every output sees the same
// kernel calls in the same K order whatever the split.
func runAMX(bl *amxBlocks, y, x []float32, m int, w *tensor.Matrix, threads int) {
	n, k := w.Rows, w.Cols
	slices := ceilDiv(k, bl.kc)
	kc := ceilDiv(ceilDiv(k, slices), amxK) * amxK // equal slices of whole steps
	slices = ceilDiv(k, kc)
	ksFull := kc / amxK
	ksTotal := (slices-1)*ksFull + ceilDiv(k-(slices-1)*kc, amxK)
	blocks := ceilDiv(m, amxRows)
	rowLen := ksTotal * amxStep // bf16 per packed row block
	sliceOf := func(s int) (k0, kb, ks, off int) {
		k0 = s * kc
		kb = min(kc, k-k0)
		return k0, kb, ceilDiv(kb, amxK), s * ksFull * amxStep
	}

	aBuf := getBuf(blocks * rowLen / 2)
	defer putBuf(aBuf)
	a := asU16(*aBuf)[:blocks*rowLen]
	parallel.For(blocks*slices, 1, threads, func(_, lo, hi int) {
		for it := lo; it < hi; it++ {
			rb, s := it/slices, it%slices
			k0, kb, ks, off := sliceOf(s)
			off += rb * rowLen
			packAAMX(a[off:off+ks*amxStep], x, k, rb*amxRows, min(amxRows, m-rb*amxRows), k0, kb)
		}
	})

	nc := max(amxRows, bl.nc/amxRows*amxRows)
	colBlocks := ceilDiv(n, nc)
	if colBlocks >= 2*threads {
		wBufs := make([]*[]float32, threads)
		for t := range wBufs {
			wBufs[t] = getBuf(nc * kc / 2)
			defer putBuf(wBufs[t])
		}
		parallel.For(colBlocks, 1, threads, func(t, lo, hi int) {
			bw := asU16(*wBufs[t])
			for cb := lo; cb < hi; cb++ {
				j0 := cb * nc
				cols := min(nc, n-j0)
				for s := 0; s < slices; s++ {
					k0, kb, ks, off := sliceOf(s)
					step := ks * amxStep
					for p := 0; p*amxRows < cols; p++ {
						packBAMX(bw[p*step:(p+1)*step], w, j0+p*amxRows, min(amxRows, cols-p*amxRows), k0, kb)
					}
					for rb := 0; rb < blocks; rb++ {
						ao := rb*rowLen + off
						amxRow(a[ao:ao+step], bw, y[rb*amxRows*n+j0:], n, min(amxRows, m-rb*amxRows), cols, ks, s > 0, &a[min(ao+rowLen, len(a)-1)])
					}
				}
			}
		})
		return
	}
	panels := ceilDiv(n, amxRows)
	bBuf := getBuf(panels * kc / 2 * amxRows)
	defer putBuf(bBuf)
	bAll := asU16(*bBuf)
	for s := 0; s < slices; s++ {
		k0, kb, ks, off := sliceOf(s)
		step := ks * amxStep
		parallel.For(panels, 1, threads, func(_, lo, hi int) {
			for p := lo; p < hi; p++ {
				packBAMX(bAll[p*step:(p+1)*step], w, p*amxRows, min(amxRows, n-p*amxRows), k0, kb)
			}
		})
		parallel.For(blocks, 1, threads, func(_, lo, hi int) {
			for rb := lo; rb < hi; rb++ {
				ao := rb*rowLen + off
				amxRow(a[ao:ao+step], bAll, y[rb*amxRows*n:], n, min(amxRows, m-rb*amxRows), n, ks, s > 0, &a[min(ao+rowLen, len(a)-1)])
			}
		})
	}
}

// amxRow runs one packed x row block (rows ≤ 32 of them, ks steps) against
// the ⌈cols/32⌉ packed W panels in b, C = y with row stride ldy. Whole
// 32×32 blocks go to the kernel in one call, straight to y; a block cut by
// the bottom or right edge goes through a 32×32 scratch tile. pf is the
// next call's A, which the kernel prefetches (any address will do:
// prefetches do not fault).
func amxRow(a, b []uint16, y []float32, ldy, rows, cols, ks int, acc bool, pf *uint16) {
	accFlag := 0
	if acc {
		accFlag = 1
	}
	step := ks * amxStep
	panels := ceilDiv(cols, amxRows)
	_ = a[step-1]
	_ = b[panels*step-1]
	full := 0
	if rows == amxRows {
		full = cols / amxRows
	}
	if full > 0 {
		_ = y[(amxRows-1)*ldy+full*amxRows-1] // the kernel's last store
		amxGemm32x32(&amxTileConfig[0], &a[0], &b[0], &y[0], ldy, ks, full, 0, 2*step, 4*amxRows, accFlag, pf)
	}
	for p := full; p < panels; p++ {
		c := min(amxRows, cols-p*amxRows)
		yb := y[p*amxRows:]
		var t [amxRows * amxRows]float32
		if acc {
			for i := 0; i < rows; i++ {
				copy(t[i*amxRows:i*amxRows+c], yb[i*ldy:i*ldy+c])
			}
		}
		amxGemm32x32(&amxTileConfig[0], &a[0], &b[p*step], &t[0], amxRows, ks, 1, 0, 0, 0, accFlag, pf)
		for i := 0; i < rows; i++ {
			copy(yb[i*ldy:i*ldy+c], t[i*amxRows:i*amxRows+c])
		}
	}
}

// packAAMX rounds rows [i0, i0+rows) × columns [k0, k0+kb) of x to bf16
// into one AMX row block: dst[s·1024 + i·32 + q] = x[i0+i, k0+32s+q], zero
// past rows and kb, for the ⌈kb/32⌉ steps dst holds. Whole steps go
// through amxPackRow; the rounding is tensor.Float32ToBF16's either way.
func packAAMX(dst []uint16, x []float32, ldx, i0, rows, k0, kb int) {
	ks := len(dst) / amxStep
	whole := kb / amxK
	for i := 0; i < amxRows; i++ {
		var src []float32
		if i < rows {
			src = x[(i0+i)*ldx+k0 : (i0+i)*ldx+k0+kb]
		}
		s := 0
		if len(src) > 0 && whole > 0 {
			_ = dst[(whole-1)*amxStep+i*amxK+amxK-1]
			amxPackRow(&dst[i*amxK], &src[0], whole)
			s = whole
		}
		for ; s < ks; s++ {
			d := dst[s*amxStep+i*amxK : s*amxStep+(i+1)*amxK]
			seg := src[min(s*amxK, len(src)):min((s+1)*amxK, len(src))]
			for q, v := range seg {
				d[q] = tensor.Float32ToBF16(v)
			}
			clear(d[len(seg):])
		}
	}
}

// packBAMX packs W rows [j0, j0+cols) × columns [k0, k0+kb) into one AMX
// panel: packBPairs' 32-wide panel of bf16 pairs, which is the layout the
// B tiles load (16 pair rows of 32 columns per step), zero-filled past kb
// to the ⌈kb/32⌉ steps dst holds.
func packBAMX(dst []uint16, w *tensor.Matrix, j0, cols, k0, kb int) {
	words := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/2)
	pairs := ceilDiv(kb, 2)
	packBPairs(words, w, amxRows, j0, cols, k0, kb)
	clear(words[pairs*amxRows:])
}

// amxSmallRows is the W rows one small-M kernel call covers: two strips
// of 16 (internal/kernelgen/linalg/amx's smallStrips).
const amxSmallRows = 32

// amxSmallConfigs[m] is the tile configuration of the small-M kernel for
// M = m: the C' tiles (tmm0, tmm1) and the x tile (tmm7) m columns wide
// (4·m bytes), the W tiles (tmm4, tmm5) 32 k, all 16 rows.
var amxSmallConfigs = func() (c [amxSmallMaxM + 1][64]byte) {
	for m := 1; m <= amxSmallMaxM; m++ {
		c[m][0] = 1
		for _, t := range []int{0, 1, 4, 5, 7} {
			colsb := 4 * m
			if t == 4 || t == 5 {
				colsb = 64
			}
			c[m][16+2*t] = byte(colsb)
			c[m][48+t] = 16
		}
	}
	return c
}()

// amxSmallMaxM is the largest M of the small-M kernel: a tile row holds 16
// float32.
const amxSmallMaxM = 16

// runAMXSmallM is the product for M ≤ 16 with bf16 weights and K a
// multiple of 32: the kernel reads W's rows where they lie, 32 at a time,
// and multiplies them by x packed once as bf16 pairs, computing y's
// columns as rows of C' = W·xᵀ, which go to y transposed. It adds the
// blocked kernel's products in the same order with the same instruction,
// only with the operands swapped, which gives the same bits on the Xeon of
// docs/perf.md (TestAMXRowsIndependentOfM; the ISA does not promise it).
// The goroutines take groups of 32 W rows as they come free; the last,
// short group is copied into a zero-padded buffer first.
func runAMXSmallM(y, x []float32, m int, w *tensor.Matrix, threads int) {
	n, k := w.Rows, w.Cols
	xBuf := getBuf(k / 2 * m)
	defer putBuf(xBuf)
	xp := *xBuf
	packAPairs(xp, x, k, 0, m, 0, k)
	xw := asU16(xp)
	cfg := &amxSmallConfigs[m]
	groups := ceilDiv(n, amxSmallRows)
	parallel.For(groups, 1, threads, func(_, lo, hi int) {
		var c [amxSmallRows * amxSmallMaxM]float32
		for g := lo; g < hi; g++ {
			j0 := g * amxSmallRows
			rows := min(amxSmallRows, n-j0)
			src := w.BF16[j0*k : (j0+rows)*k]
			if rows < amxSmallRows {
				pad := getBuf(amxSmallRows * k / 2)
				defer putBuf(pad)
				p := asU16(*pad)
				clear(p[copy(p, src):])
				src = p
			}
			_ = src[amxSmallRows*k-1]
			amxGemvT(&cfg[0], &src[0], 2*k, &xw[0], &c[0], k/amxK)
			for r := 0; r < rows; r++ {
				for i := 0; i < m; i++ {
					y[i*n+j0+r] = c[r*m+i]
				}
			}
		}
	})
}
