//go:build goexperiment.simd && amd64

package attention

import (
	"simd/archsimd"
	"unsafe"
)

// On AVX-512 machines the tile products and the softmax step work on 16
// query rows per instruction.
func init() {
	if archsimd.X86.AVX512() {
		// Vector constants are built here, behind the check: building one
		// executes AVX-512 instructions.
		ec = newExpConsts()
		swapHalves = archsimd.LoadUint32x16(&[16]uint32{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7})
		gemm = gemmAVX512
		softmaxBlock = softmaxBlockAVX512
		smallTile = smallTileAVX512
		scaleRow = scaleRowAVX512
	}
}

type vec = archsimd.Float32x16

func splat(f float32) vec { return archsimd.BroadcastFloat32x16(f) }

// The inner loops index raw pointers: slice bounds checks and spilled
// slice headers cost more than the arithmetic. gemmAVX512 checks every
// bound once, up front.
func ld(p unsafe.Pointer, i int) vec {
	return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(p, i*4)))
}

func st(v vec, p unsafe.Pointer, i int) { v.Store((*[16]float32)(unsafe.Add(p, i*4))) }

func bc(p unsafe.Pointer, i int) vec {
	return archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(p, i*4)))
}

func ptr(s []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// gemmAVX512 is gemmScalar in register tiles of 4 rows × 32 lanes (eight
// accumulators, two B vectors and four broadcasts: within the 15 vector
// registers archsimd allocates, so nothing spills), with 16-lane and
// single-row tiles for the edges. Lane counts that are not a multiple of
// 16 (head dims no model uses) take the scalar path.
func gemmAVX512(rows, kdim int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, lanes int, cv []float32, laneOuter bool) {
	if rows == 0 || kdim == 0 || lanes%16 != 0 {
		gemmScalar(rows, kdim, a, ars, aks, b, ldb, c, ldc, lanes, cv, laneOuter)
		return
	}
	if len(a) <= (rows-1)*ars+(kdim-1)*aks || len(b) < (kdim-1)*ldb+lanes || len(c) < (rows-1)*ldc+lanes ||
		(cv != nil && len(cv) < lanes) {
		panic("attention: gemm bounds") // unreachable: the tile code sizes every buffer
	}
	var pcv unsafe.Pointer
	if cv != nil {
		pcv = ptr(cv)
	}
	gemmTiles(rows, kdim, ptr(a), ars, aks, ptr(b), ldb, ptr(c), ldc, lanes, pcv, laneOuter)
}

// gemmTiles computes, for r < rows and lanes i < lanes (a multiple of 16),
// c[r·ldc+i] = cv[i]·c[r·ldc+i] + Σ_k a[r·ars+k·aks]·b[k·ldb+i], or without
// the cv term when cv is nil. The caller has checked every bound.
// laneOuter walks lane chunks in the outer loop, so one B panel serves all
// row groups; otherwise each group of A rows serves all lane chunks.
func gemmTiles(rows, kdim int, pa unsafe.Pointer, ars, aks int, pb unsafe.Pointer, ldb int, pc unsafe.Pointer, ldc, lanes int, pcv unsafe.Pointer, laneOuter bool) {
	// tiles runs one lane chunk [i, i+width) over rows [r0, r1).
	tiles := func(i, width, r0, r1 int) {
		var cv unsafe.Pointer
		if pcv != nil {
			cv = unsafe.Add(pcv, i*4)
		}
		pb := unsafe.Add(pb, i*4)
		for r := r0; r < r1; {
			pa := unsafe.Add(pa, r*ars*4)
			pc := unsafe.Add(pc, (r*ldc+i)*4)
			switch {
			case r+4 <= r1 && width == 32:
				tile4x32(kdim, pa, ars, aks, pb, ldb, pc, ldc, cv)
				r += 4
			case r+4 <= r1:
				tile4x16(kdim, pa, ars, aks, pb, ldb, pc, ldc, cv)
				r += 4
			case width == 32:
				tile1x32(kdim, pa, aks, pb, ldb, pc, cv)
				r++
			default:
				tile1x16(kdim, pa, aks, pb, ldb, pc, cv)
				r++
			}
		}
	}
	lanes32 := lanes &^ 31
	if laneOuter {
		for i := 0; i < lanes32; i += 32 {
			tiles(i, 32, 0, rows)
		}
		if lanes32 < lanes {
			tiles(lanes32, 16, 0, rows)
		}
		return
	}
	for r := 0; r < rows; {
		step := 4
		if rows-r < 4 {
			step = 1
		}
		for i := 0; i < lanes32; i += 32 {
			tiles(i, 32, r, r+step)
		}
		if lanes32 < lanes {
			tiles(lanes32, 16, r, r+step)
		}
		r += step
	}
}

// tile4x32 computes a 4-row × 32-lane block of C at c (rows ldc apart):
// A rows at a + r·ars with k steps aks apart, B rows ldb apart, and cv the
// 32 lane rescale factors, or nil to overwrite C. Offsets advance as
// integers, never as pointers: a pointer may not step past its allocation,
// not even after the last iteration (checkptr enforces this under -race).
func tile4x32(kdim int, a unsafe.Pointer, ars, aks int, b unsafe.Pointer, ldb int, c unsafe.Pointer, ldc int, cv unsafe.Pointer) {
	var c00, c01, c10, c11, c20, c21, c30, c31 vec
	ai, bi := 0, 0
	for range kdim {
		b0, b1 := ld(b, bi), ld(b, bi+16)
		x := bc(a, ai)
		c00 = b0.MulAdd(x, c00)
		c01 = b1.MulAdd(x, c01)
		x = bc(a, ai+ars)
		c10 = b0.MulAdd(x, c10)
		c11 = b1.MulAdd(x, c11)
		x = bc(a, ai+2*ars)
		c20 = b0.MulAdd(x, c20)
		c21 = b1.MulAdd(x, c21)
		x = bc(a, ai+3*ars)
		c30 = b0.MulAdd(x, c30)
		c31 = b1.MulAdd(x, c31)
		ai += aks
		bi += ldb
	}
	put(c, 0, cv, 0, c00)
	put(c, 16, cv, 16, c01)
	put(c, ldc, cv, 0, c10)
	put(c, ldc+16, cv, 16, c11)
	put(c, 2*ldc, cv, 0, c20)
	put(c, 2*ldc+16, cv, 16, c21)
	put(c, 3*ldc, cv, 0, c30)
	put(c, 3*ldc+16, cv, 16, c31)
}

// tile4x16 is tile4x32 for a 16-lane edge.
func tile4x16(kdim int, a unsafe.Pointer, ars, aks int, b unsafe.Pointer, ldb int, c unsafe.Pointer, ldc int, cv unsafe.Pointer) {
	var c0, c1, c2, c3 vec
	ai, bi := 0, 0
	for range kdim {
		b0 := ld(b, bi)
		c0 = b0.MulAdd(bc(a, ai), c0)
		c1 = b0.MulAdd(bc(a, ai+ars), c1)
		c2 = b0.MulAdd(bc(a, ai+2*ars), c2)
		c3 = b0.MulAdd(bc(a, ai+3*ars), c3)
		ai += aks
		bi += ldb
	}
	put(c, 0, cv, 0, c0)
	put(c, ldc, cv, 0, c1)
	put(c, 2*ldc, cv, 0, c2)
	put(c, 3*ldc, cv, 0, c3)
}

// tile1x32 is tile4x32 for one row.
func tile1x32(kdim int, a unsafe.Pointer, aks int, b unsafe.Pointer, ldb int, c unsafe.Pointer, cv unsafe.Pointer) {
	var c0, c1 vec
	ai, bi := 0, 0
	for range kdim {
		x := bc(a, ai)
		c0 = ld(b, bi).MulAdd(x, c0)
		c1 = ld(b, bi+16).MulAdd(x, c1)
		ai += aks
		bi += ldb
	}
	put(c, 0, cv, 0, c0)
	put(c, 16, cv, 16, c1)
}

// tile1x16 is tile4x32 for one row and 16 lanes.
func tile1x16(kdim int, a unsafe.Pointer, aks int, b unsafe.Pointer, ldb int, c unsafe.Pointer, cv unsafe.Pointer) {
	var c0 vec
	ai, bi := 0, 0
	for range kdim {
		c0 = ld(b, bi).MulAdd(bc(a, ai), c0)
		ai += aks
		bi += ldb
	}
	put(c, 0, cv, 0, c0)
}

// put stores acc at c[i], or cv[j]·c[i] + acc when cv is not nil (the
// online-softmax rescale of the running output, folded into the store).
func put(c unsafe.Pointer, i int, cv unsafe.Pointer, j int, acc vec) {
	if cv != nil {
		acc = ld(c, i).MulAdd(ld(cv, j), acc)
	}
	st(acc, c, i)
}

// softmaxBlockAVX512 is softmaxBlockScalar on 16 rows at a time.
func softmaxBlockAVX512(s []float32, mp int, m, l, corr []float32) {
	jn := len(s) / mp
	if mp%16 != 0 || len(m) < mp || len(l) < mp || len(corr) < mp || len(s) < jn*mp {
		panic("attention: softmax bounds") // unreachable, as for gemm
	}
	ps, pm, pl, pcorr := ptr(s), ptr(m), ptr(l), ptr(corr)
	for i := 0; i < mp; i += 16 {
		mOld := ld(pm, i)
		mx := mOld
		for j := range jn {
			mx = mx.Max(ld(ps, j*mp+i))
		}
		var sum vec
		for j := range jn {
			p := ec.exp(ld(ps, j*mp+i).Sub(mx))
			st(p, ps, j*mp+i)
			sum = sum.Add(p)
		}
		cr := ec.exp(mOld.Sub(mx))
		st(cr, pcorr, i)
		st(ld(pl, i).MulAdd(cr, sum), pl, i)
		st(mx, pm, i)
	}
}

// ec holds the broadcast constants of the vector exp, built once so the
// loops read them as memory operands (Go does not hoist the broadcasts).
var ec *expConsts

// expConsts are the exp constants, one per lane.
type expConsts struct {
	lo, log2e, negLn2Hi, negLn2Lo vec
	coef                          [7]vec
	one                           vec
}

func newExpConsts() *expConsts {
	e := &expConsts{lo: splat(-104), log2e: splat(log2e),
		negLn2Hi: splat(-ln2Hi), negLn2Lo: splat(-ln2Lo), one: splat(1)}
	for i, c := range expCoef {
		e.coef[i] = splat(c)
	}
	return e
}

// exp is expFast on 16 lanes for x ≤ 0. VSCALEFPS applies 2^n and
// underflows gracefully, reaching 0 by x = −104 (where −Inf is clamped).
func (e *expConsts) exp(x vec) vec {
	x = x.Max(e.lo)
	n := x.Mul(e.log2e).RoundToEvenScaled(0)
	r := n.MulAdd(e.negLn2Hi, x)
	r = n.MulAdd(e.negLn2Lo, r)
	p := e.coef[0].MulAdd(r, e.coef[1])
	p = p.MulAdd(r, e.coef[2])
	p = p.MulAdd(r, e.coef[3])
	p = p.MulAdd(r, e.coef[4])
	p = p.MulAdd(r, e.coef[5])
	p = p.MulAdd(r, e.coef[6])
	p = p.MulAdd(r, e.one)
	return p.Scale(n)
}
