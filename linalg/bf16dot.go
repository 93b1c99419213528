package linalg

import (
	"math"
	"unsafe"

	"github.com/qwenref/qwenref/tensor"
)

// BlockedBF16Dot is an opt-in, faster and less exact product for CPUs with
// AVX512_BF16 (Zen 4 and later, Cooper Lake, Sapphire Rapids). It is not
// the float32 product: it rounds every x value to bf16 (nearest, ties to
// even, as tensor.Float32ToBF16) and float32 weights too (bf16 weights are
// used as they are), then multiplies with VDPBF16PS, which does two k steps
// per instruction, twice the rate of a float32 FMA.
//
// Numerics, per output: the bf16×bf16 products are exact in float32; within
// each K slice of the blocking they are added into a float32 accumulator in
// k order, the odd k of each pair first, each addition rounded to nearest
// even, with bf16 subnormal inputs read as zero and subnormal sums flushed
// to zero (the instruction ignores MXCSR); slices are then summed into y in
// order. So the error is dominated by rounding x to 8 significant bits
// (up to 2⁻⁹ relative per term): a relative L2 of 1.4e-3 against the
// float32 product on random data (TestBF16DotAccuracy), against ~4e-7 for
// Blocked. The measured speed is 1.6–1.9× Blocked on this machine's Zen 5.
//
// Every M takes the blocked path, so numerics do not depend on M. On CPUs
// without AVX512_BF16 a pure-Go kernel with the same numerics runs instead
// (slowly). The zero value is ready to use and safe for concurrent calls.
type BlockedBF16Dot struct {
	// Threads caps the goroutines one call uses; 0 means runtime.GOMAXPROCS.
	Threads int

	gemm *gemmKernel // nil: bf16DotKernels[0]
	blk  *blocking   // nil: bf16DotBlocking
}

// bf16DotKernels lists the kernels for BlockedBF16Dot, best first.
var bf16DotKernels = []*gemmKernel{goBF16Dot}

// MatMulT implements MatMuler.
func (b BlockedBF16Dot) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	blk := &bf16DotBlocking
	if b.blk != nil {
		blk = b.blk
	}
	threads, done, err := prologue(y, x, m, w, b.Threads, blk)
	if done || err != nil {
		return err
	}
	gk := b.gemm
	if gk == nil {
		gk = bf16DotKernels[0]
	}
	runGemm(gk, blk, y, x, m, w, threads)
	return nil
}

// asU32 views a packing buffer as the 32-bit bf16 pairs it holds.
func asU32(s []float32) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// packAPairs rounds rows [i0, i0+rows) × columns [k0, k0+kb) of x to bf16
// and packs them as pairs: word p·rows+i holds x[i0+i, k0+2p] in its low
// half and x[i0+i, k0+2p+1] (zero past kb) in its high half.
func packAPairs(dst, x []float32, ldx, i0, rows, k0, kb int) {
	ku := (kb + 1) / 2
	d := asU32(dst[:ku*rows])
	for i := 0; i < rows; i++ {
		src := x[(i0+i)*ldx+k0 : (i0+i)*ldx+k0+kb]
		for p := 0; p < kb/2; p++ {
			d[p*rows+i] = uint32(tensor.Float32ToBF16(src[2*p])) | uint32(tensor.Float32ToBF16(src[2*p+1]))<<16
		}
		if kb%2 == 1 {
			d[(ku-1)*rows+i] = uint32(tensor.Float32ToBF16(src[kb-1]))
		}
	}
}

// packBPairs packs W rows [j0, j0+cols) × columns [k0, k0+kb) as bf16
// pairs in an nr-wide panel: word p·nr+j holds W[j0+j, k0+2p] (low) and
// W[j0+j, k0+2p+1] (high, zero past kb), zero words for j ≥ cols. A bf16
// row read as 32-bit words already is that pair sequence, so for even,
// aligned slices the panel is the plain 32-bit transpose of W.
func packBPairs(dst []float32, w *tensor.Matrix, nr, j0, cols, k0, kb int) {
	ku := (kb + 1) / 2
	d := asU32(dst[:ku*nr])
	ldw := w.Cols
	p0 := 0
	if w.BF16 != nil {
		_ = w.BF16[(j0+cols-1)*ldw+k0+kb-1]
		aligned := uintptr(unsafe.Pointer(unsafe.SliceData(w.BF16)))%4 == 0 && ldw%2 == 0 && k0%2 == 0
		if tposeF32 != nil && aligned && nr%16 == 0 && kb >= 32 {
			nb := kb / 32 // blocks of 16 pairs
			for h := 0; h < nr; h += 16 {
				rows := min(16, cols-h)
				if rows <= 0 {
					for p := 0; p < 16*nb; p++ {
						clear(d[p*nr+h : p*nr+h+16])
					}
					continue
				}
				src := (*float32)(unsafe.Pointer(&w.BF16[(j0+h)*ldw+k0]))
				tposeF32(&dst[h], nr, src, ldw/2, rows, nb, 0xffff)
			}
			p0 = 16 * nb
		}
	}
	for j := 0; j < cols; j++ {
		off := (j0+j)*ldw + k0
		for p := p0; p < ku; p++ {
			var lo, hi uint32
			if w.BF16 != nil {
				lo = uint32(w.BF16[off+2*p])
				if 2*p+1 < kb {
					hi = uint32(w.BF16[off+2*p+1])
				}
			} else {
				lo = uint32(tensor.Float32ToBF16(w.F32[off+2*p]))
				if 2*p+1 < kb {
					hi = uint32(tensor.Float32ToBF16(w.F32[off+2*p+1]))
				}
			}
			d[p*nr+j] = lo | hi<<16
		}
	}
	if cols < nr {
		for p := p0; p < ku; p++ {
			clear(d[p*nr+cols : (p+1)*nr])
		}
	}
}

// goBF16Dot is the portable kernel with VDPBF16PS numerics. It is the
// reference the assembly kernel is tested against bit for bit.
var goBF16Dot = &gemmKernel{
	name: "go-bf16dot4x16", mr: 4, nr: 16, prio: 0, tile: goBF16DotTile,
	kstep: 2, packA: packAPairs, packB: packBPairs,
}

func goBF16DotTile(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	au, bu := asU32(a[:kc*rows]), asU32(b[:kc*16])
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			var s float32
			for p := 0; p < kc; p++ {
				x, w := au[p*rows+i], bu[p*16+j]
				s = dpStep(s, x>>16, w>>16) // the odd k first, as the instruction does
				s = dpStep(s, x&0xffff, w&0xffff)
			}
			if acc {
				c[i*ldc+j] += s
			} else {
				c[i*ldc+j] = s
			}
		}
	}
}

// dpStep is one half of VDPBF16PS: s + x·w for bf16 x and w, with subnormal
// inputs read as zero, the product exact, one rounding to nearest even, and
// a subnormal result flushed to zero.
func dpStep(s float32, x, w uint32) float32 {
	xf, wf := bf16DAZ(x), bf16DAZ(w)
	p := float64(xf) * float64(wf) // exact: 8-bit × 8-bit significands
	r := roundSum32(s, p)
	if r != 0 && math.Abs(float64(r)) < 0x1p-126 {
		r = float32(math.Copysign(0, float64(r)))
	}
	return r
}

func bf16DAZ(b uint32) float32 {
	if b&0x7f80 == 0 { // zero exponent: zero or subnormal
		b &= 0x8000
	}
	return math.Float32frombits(b << 16)
}

// roundSum32 returns float32(s + p) rounded once (to nearest, ties to even),
// where float64 addition alone could round twice. TwoSum gives the exact
// error e of the float64 sum; it only matters when that sum lands exactly
// midway between two float32s, and then e says which way the true value
// lies.
func roundSum32(s float32, p float64) float32 {
	sum := float64(s) + p
	r := float32(sum)
	if math.IsInf(sum, 0) || math.IsNaN(sum) || math.IsInf(float64(r), 0) {
		return r
	}
	bb := sum - float64(s)
	e := (float64(s) - (sum - bb)) + (p - bb)
	if e == 0 || float64(r) == sum {
		return r
	}
	lo, hi := r, r
	if float64(r) < sum {
		hi = math.Nextafter32(r, float32(math.Inf(1)))
	} else {
		lo = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if sum-float64(lo) != float64(hi)-sum {
		return r // not a midpoint: e cannot move it across one
	}
	if e > 0 {
		return hi
	}
	return lo
}
