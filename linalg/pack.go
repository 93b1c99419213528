package linalg

import (
	"math"
	"unsafe"

	"github.com/qwenref/qwenref/tensor"
)

// Register-tile transposers for up to 16 rows at a time, set by init on
// CPUs that have them (AVX-512); nil means the scalar loops below. Each call
// transposes `blocks` blocks of 16 columns: for r < rows and c < 16·blocks,
// dst[c·ldd+r] = src[r·lds+c] (bf16 widened), stored under a lane mask.
var (
	tposeF32  func(dst *float32, ldd int, src *float32, lds, rows, blocks int, mask uint64)
	tposeBF16 func(dst *float32, ldd int, src *uint16, lds, rows, blocks int, mask uint64)
)

// The 8-row, 8-column forms (AVX2), used where the 16-wide ones are nil;
// mask[i] < 0 stores lane i, a nil mask all 8.
var (
	tpose8F32  func(dst *float32, ldd int, src *float32, lds, rows, blocks int, mask *[8]int32)
	tpose8BF16 func(dst *float32, ldd int, src *uint16, lds, rows, blocks int, mask *[8]int32)
)

// The 4-row, 4-column forms (NEON), used where the wider ones are nil:
// for r < 4 and c < 4·blocks, dst[c·ldd+r] = src[r·lds+c].
var (
	tpose4F32  func(dst *float32, ldd int, src *float32, lds, blocks int)
	tpose4BF16 func(dst *float32, ldd int, src *uint16, lds, blocks int)
)

// laneMask8[r] keeps the first r of 8 lanes.
var laneMask8 = func() (m [9][8]int32) {
	for r := range m {
		for i := 0; i < r; i++ {
			m[r][i] = -1
		}
	}
	return m
}()

// packA copies rows [i0, i0+rows) × columns [k0, k0+kc) of x (row stride
// ldx) into one micro-panel: dst[k·rows+i] = x[i0+i, k0+k]. The kernel
// broadcasts dst[k·rows+i] for each k, so the panel is k-major.
func packA(dst, x []float32, ldx, i0, rows, k0, kc int) {
	dst = dst[:kc*rows]
	_ = x[(i0+rows-1)*ldx+k0+kc-1]
	k := 0
	if tposeF32 != nil && rows <= 16 && kc >= 16 {
		nb := kc / 16
		tposeF32(unsafe.SliceData(dst), rows, &x[i0*ldx+k0], ldx, rows, nb, 1<<rows-1)
		k = 16 * nb
	} else if tpose8F32 != nil && rows <= 8 && kc >= 8 {
		// Whole 8-lane stores spill past a short row of the panel into the
		// next one, which the following store then writes: so only the
		// last block, whose spill would leave the block, needs the mask.
		nb := kc / 8
		if nb > 1 {
			tpose8F32(unsafe.SliceData(dst), rows, &x[i0*ldx+k0], ldx, rows, nb-1, nil)
		}
		var mask *[8]int32
		if rows < 8 {
			mask = &laneMask8[rows]
		}
		tpose8F32(&dst[8*(nb-1)*rows], rows, &x[i0*ldx+k0+8*(nb-1)], ldx, rows, 1, mask)
		k = 8 * nb
	} else if tpose4F32 != nil && kc >= 4 {
		// Strips of 4 rows; the last rows%4 rows go through the loop.
		nb := kc / 4
		h := 0
		for ; h+4 <= rows; h += 4 {
			tpose4F32(&dst[h], rows, &x[(i0+h)*ldx+k0], ldx, nb)
		}
		for i := h; i < rows; i++ {
			for kk, v := range x[(i0+i)*ldx+k0 : (i0+i)*ldx+k0+4*nb] {
				dst[kk*rows+i] = v
			}
		}
		k = 4 * nb
	}
	for i := 0; i < rows; i++ {
		src := x[(i0+i)*ldx+k0+k : (i0+i)*ldx+k0+kc]
		for kk, v := range src {
			dst[(k+kk)*rows+i] = v
		}
	}
}

// packB widens and transposes rows [j0, j0+cols) × columns [k0, k0+kc) of
// W into one nr-wide micro-panel: dst[k·nr+j] = W[j0+j, k0+k], with zeros
// for j ≥ cols so the kernel can always load nr values. bf16 weights are
// widened here (exactly), which keeps them bf16 everywhere else.
func packB(dst []float32, w *tensor.Matrix, nr, j0, cols, k0, kc int) {
	dst = dst[:kc*nr]
	ldw := w.Cols
	if w.BF16 != nil {
		_ = w.BF16[(j0+cols-1)*ldw+k0+kc-1]
	} else {
		_ = w.F32[(j0+cols-1)*ldw+k0+kc-1]
	}
	k := 0
	if tposeF32 != nil && nr%16 == 0 && kc >= 16 {
		// nr/16 strips of 16 rows; a strip past the last row stays zero
		// (the transposer zero-fills the missing rows of a partial strip).
		nb := kc / 16
		for h := 0; h < nr; h += 16 {
			rows := min(16, cols-h)
			if rows <= 0 {
				for kk := 0; kk < 16*nb; kk++ {
					clear(dst[kk*nr+h : kk*nr+h+16])
				}
				continue
			}
			off := (j0+h)*ldw + k0
			if w.BF16 != nil {
				tposeBF16(&dst[h], nr, &w.BF16[off], ldw, rows, nb, 0xffff)
			} else {
				tposeF32(&dst[h], nr, &w.F32[off], ldw, rows, nb, 0xffff)
			}
		}
		k = 16 * nb
	} else if tpose8F32 != nil && nr%8 == 0 && kc >= 8 {
		// The same in strips of 8 rows, all 8 lanes stored (missing rows
		// are zero-filled by the transposer).
		nb := kc / 8
		for h := 0; h < nr; h += 8 {
			rows := min(8, cols-h)
			if rows <= 0 {
				for kk := 0; kk < 8*nb; kk++ {
					clear(dst[kk*nr+h : kk*nr+h+8])
				}
				continue
			}
			off := (j0+h)*ldw + k0
			if w.BF16 != nil {
				tpose8BF16(&dst[h], nr, &w.BF16[off], ldw, rows, nb, nil)
			} else {
				tpose8F32(&dst[h], nr, &w.F32[off], ldw, rows, nb, nil)
			}
		}
		k = 8 * nb
	} else if tpose4F32 != nil && nr%4 == 0 && kc >= 4 {
		// Strips of 4 rows; a partial or empty last strip is left to the
		// loops below (and zeroed here past cols).
		nb := kc / 4
		for h := 0; h < nr; h += 4 {
			if cols-h < 4 {
				for kk := 0; kk < 4*nb; kk++ {
					clear(dst[kk*nr+h : kk*nr+h+4])
				}
				continue
			}
			off := (j0+h)*ldw + k0
			if w.BF16 != nil {
				tpose4BF16(&dst[h], nr, &w.BF16[off], ldw, nb)
			} else {
				tpose4F32(&dst[h], nr, &w.F32[off], ldw, nb)
			}
		}
		k = 4 * nb
		// Rows of a partial strip: the transposed part, by the loop.
		for j := cols / 4 * 4; j < cols; j++ {
			off := (j0+j)*ldw + k0
			for kk := 0; kk < k; kk++ {
				if w.BF16 != nil {
					dst[kk*nr+j] = math.Float32frombits(uint32(w.BF16[off+kk]) << 16)
				} else {
					dst[kk*nr+j] = w.F32[off+kk]
				}
			}
		}
	}
	for j := 0; j < cols; j++ {
		off := (j0+j)*ldw + k0
		if w.BF16 != nil {
			for kk, v := range w.BF16[off+k : off+kc] {
				dst[(k+kk)*nr+j] = math.Float32frombits(uint32(v) << 16)
			}
		} else {
			for kk, v := range w.F32[off+k : off+kc] {
				dst[(k+kk)*nr+j] = v
			}
		}
	}
	if cols < nr {
		for kk := k; kk < kc; kk++ {
			clear(dst[kk*nr+cols : (kk+1)*nr])
		}
	}
}
