//go:build goexperiment.simd

package gateddelta

import (
	"simd/archsimd"
	"unsafe"
)

// AVX-512 versions of the hot kernels, written with Go 1.26's archsimd.
// They index through raw pointers after one explicit bounds check per call
// (on the extreme index each kernel can touch), so the inner loops carry
// no bounds checks. The matrix tile is 4×32 (8 accumulators): Go 1.26's
// register allocator spills the 12- and 16-accumulator tiles (6×32, 4×64),
// which then run at a third of the speed.

// simdEnabled reports whether the archsimd kernels are in use: this build
// has them, and they run only on CPUs with AVX-512 (F/CD/BW/DQ/VL) and FMA.
var simdEnabled = archsimd.X86.AVX512() && archsimd.X86.FMA()

type vec = archsimd.Float32x16

// at is p advanced by i float32s; i must stay inside p's allocation.
func at(p *float32, i int) *float32 { return (*float32)(unsafe.Add(unsafe.Pointer(p), 4*i)) }
func ld(p *float32) vec             { return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Pointer(p))) }
func st(x vec, p *float32)          { x.Store((*[16]float32)(unsafe.Pointer(p))) }
func splat(x float32) vec           { return archsimd.BroadcastFloat32x16(x) }

// gemm computes C = beta·C + alpha·diag(rs)·A·B; see gemmGeneric for the
// operand conventions. Full 4×32 and 4×16 tiles run in SIMD; ragged rows and
// columns (never at the model's shapes) go to the portable code.
func gemm(m, n, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	if !simdEnabled || m == 0 || n == 0 || k == 0 {
		gemmGeneric(m, n, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
		return
	}
	_ = a[(m-1)*lda+(k-1)*aks]
	_ = b[(k-1)*ldb+n-1]
	_ = c[(m-1)*ldc+n-1]
	if rs != nil {
		_ = rs[m-1]
	}
	m4, n16, n32 := m&^3, n&^15, n&^31
	for j0 := 0; j0 < n16; {
		bw := 16
		if j0 < n32 {
			bw = 32
		}
		for i0 := 0; i0 < m4; i0 += 4 {
			if tri == triLowerC && j0 > i0+3 {
				continue // the whole tile is right of the diagonal
			}
			kk := k
			if tri == triLowerA {
				kk = min(k, i0+4)
			}
			al := [4]float32{alpha, alpha, alpha, alpha}
			if rs != nil {
				al = [4]float32{alpha * rs[i0], alpha * rs[i0+1], alpha * rs[i0+2], alpha * rs[i0+3]}
			}
			pa, pc := &a[i0*lda], &c[i0*ldc+j0]
			if bw == 32 {
				tile4x32(kk, pa, lda, aks, &b[j0], ldb, pc, ldc, &al, beta)
			} else {
				tile4x16(kk, pa, lda, aks, &b[j0], ldb, pc, ldc, &al, beta)
			}
		}
		j0 += bw
	}
	if m4 < m {
		gemmGenericRange(m4, m, 0, n16, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
	}
	if n16 < n {
		gemmGenericRange(0, m, n16, n, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
	}
}

// wb writes one accumulator back: C = beta·C + alpha·acc (C unread when
// beta is 0).
func wb(p *float32, acc vec, alpha, beta float32) {
	if beta == 0 {
		st(acc.Mul(splat(alpha)), p)
		return
	}
	st(acc.MulAdd(splat(alpha), ld(p).Mul(splat(beta))), p)
}

// tile4x32 is the register-blocked micro-kernel: a 4×32 block of C from
// kk rank-one updates (four broadcasts of A, two vectors of B, eight FMAs),
// written back as C = beta·C + al[i]·acc for row i.
// Pointers advance only while another step follows, so none ever points
// past its operand. (No helper calls in the loop: each inlined helper
// leaves a NOP behind, and those cost ~20% here.)
func tile4x32(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32) {
	var c00, c01, c10, c11, c20, c21, c30, c31 vec
	pa, pb := unsafe.Pointer(a), unsafe.Pointer(b)
	la := uintptr(4 * lda)
	sa, sb := uintptr(4*aks), uintptr(4*ldb)
	for p := 0; p < kk; p++ {
		b0 := archsimd.LoadFloat32x16((*[16]float32)(pb))
		b1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 64)))
		a1 := unsafe.Add(pa, la)
		a2 := unsafe.Add(a1, la)
		a3 := unsafe.Add(a2, la)
		x := archsimd.BroadcastFloat32x16(*(*float32)(pa))
		c00 = b0.MulAdd(x, c00)
		c01 = b1.MulAdd(x, c01)
		x = archsimd.BroadcastFloat32x16(*(*float32)(a1))
		c10 = b0.MulAdd(x, c10)
		c11 = b1.MulAdd(x, c11)
		x = archsimd.BroadcastFloat32x16(*(*float32)(a2))
		c20 = b0.MulAdd(x, c20)
		c21 = b1.MulAdd(x, c21)
		x = archsimd.BroadcastFloat32x16(*(*float32)(a3))
		c30 = b0.MulAdd(x, c30)
		c31 = b1.MulAdd(x, c31)
		if p+1 < kk {
			pa = unsafe.Add(pa, sa)
			pb = unsafe.Add(pb, sb)
		}
	}
	wb(c, c00, al[0], beta)
	wb(at(c, 16), c01, al[0], beta)
	wb(at(c, ldc), c10, al[1], beta)
	wb(at(c, ldc+16), c11, al[1], beta)
	wb(at(c, 2*ldc), c20, al[2], beta)
	wb(at(c, 2*ldc+16), c21, al[2], beta)
	wb(at(c, 3*ldc), c30, al[3], beta)
	wb(at(c, 3*ldc+16), c31, al[3], beta)
}

// tile4x16 is tile4x32 for a 16-column remainder.
func tile4x16(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32) {
	var c0, c1, c2, c3 vec
	pa, pb := unsafe.Pointer(a), unsafe.Pointer(b)
	la := uintptr(4 * lda)
	sa, sb := uintptr(4*aks), uintptr(4*ldb)
	for p := 0; p < kk; p++ {
		b0 := archsimd.LoadFloat32x16((*[16]float32)(pb))
		a1 := unsafe.Add(pa, la)
		a2 := unsafe.Add(a1, la)
		a3 := unsafe.Add(a2, la)
		c0 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(pa)), c0)
		c1 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(a1)), c1)
		c2 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(a2)), c2)
		c3 = b0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(a3)), c3)
		if p+1 < kk {
			pa = unsafe.Add(pa, sa)
			pb = unsafe.Add(pb, sb)
		}
	}
	wb(c, c0, al[0], beta)
	wb(at(c, ldc), c1, al[1], beta)
	wb(at(c, 2*ldc), c2, al[2], beta)
	wb(at(c, 3*ldc), c3, al[3], beta)
}

// exp16 is e^x for 16 lanes: Cody–Waite reduction x = n ln2 + r with
// |r| ≤ ln2/2, a degree-6 minimax polynomial for e^r (the Cephes expf
// coefficients, ~1 ulp), then 2ⁿ built in the exponent bits. x is
// clamped to [−87.3, 88] so 2ⁿ stays a normal float.
func exp16(x vec) vec {
	const (
		log2e = 1.44269504088896341
		ln2Hi = 0.693359375
		ln2Lo = -2.12194440e-4
	)
	x = x.Max(splat(-87.3)).Min(splat(88))
	n := x.Mul(splat(log2e)).RoundToEvenScaled(0)
	r := n.MulAdd(splat(-ln2Hi), x)
	r = n.MulAdd(splat(-ln2Lo), r)
	p := splat(1.9875691500e-4)
	p = p.MulAdd(r, splat(1.3981999507e-3))
	p = p.MulAdd(r, splat(8.3334519073e-3))
	p = p.MulAdd(r, splat(4.1665795894e-2))
	p = p.MulAdd(r, splat(1.6666665459e-1))
	p = p.MulAdd(r, splat(5.0000001201e-1))
	p = p.MulAdd(r.Mul(r), r).Add(splat(1))
	e := n.ConvertToInt32().Add(archsimd.BroadcastInt32x16(127)).ShiftAllLeft(23).AsFloat32x16()
	return p.Mul(e)
}

// expAffine sets dst[i] = exp(a + b·src[i]) (see expAffineGeneric): the
// exponent in float64, rounded to float32 for exp16.
func expAffine(dst []float32, src []float64, a, b float64) {
	n := len(dst)
	if !simdEnabled || n < 16 {
		expAffineGeneric(dst, src, a, b)
		return
	}
	src = src[:n]
	av, bv := archsimd.BroadcastFloat64x8(a), archsimd.BroadcastFloat64x8(b)
	i := 0
	for ; i+16 <= n; i += 16 {
		lo := archsimd.LoadFloat64x8((*[8]float64)(src[i:])).MulAdd(bv, av).ConvertToFloat32()
		hi := archsimd.LoadFloat64x8((*[8]float64)(src[i+8:])).MulAdd(bv, av).ConvertToFloat32()
		exp16(vec{}.SetLo(lo).SetHi(hi)).Store((*[16]float32)(dst[i:]))
	}
	expAffineGeneric(dst[i:], src[i:], a, b)
}

// axpy sets y += a·x over len(y).
func axpy(y []float32, a float32, x []float32) {
	n := len(y)
	if !simdEnabled || n < 16 {
		axpyGeneric(y, a, x)
		return
	}
	x = x[:n]
	av := splat(a)
	i := 0
	for ; i+16 <= n; i += 16 {
		ld(&x[i]).MulAdd(av, ld(&y[i])).Store((*[16]float32)(y[i:]))
	}
	axpyGeneric(y[i:], a, x[i:])
}

// scaleCopy sets dst = a·src over len(dst).
func scaleCopy(dst, src []float32, a float32) {
	n := len(dst)
	if !simdEnabled || n < 16 {
		scaleCopyGeneric(dst, src, a)
		return
	}
	src = src[:n]
	av := splat(a)
	i := 0
	for ; i+16 <= n; i += 16 {
		ld(&src[i]).Mul(av).Store((*[16]float32)(dst[i:]))
	}
	scaleCopyGeneric(dst[i:], src[i:], a)
}

// mulScaled sets dst = a·(x ⊙ y) over len(dst).
func mulScaled(dst, x, y []float32, a float32) {
	n := len(dst)
	if !simdEnabled || n < 16 {
		mulScaledGeneric(dst, x, y, a)
		return
	}
	x, y = x[:n], y[:n]
	av := splat(a)
	i := 0
	for ; i+16 <= n; i += 16 {
		ld(&x[i]).Mul(ld(&y[i])).Mul(av).Store((*[16]float32)(dst[i:]))
	}
	mulScaledGeneric(dst[i:], x[i:], y[i:], a)
}

// triInvAcc sets dst = −Σ_{s=j0}^{r−1} N_rs · T_s[j0:j0+len(dst)] (see
// triInvAccGeneric) for len(dst) = 64: four independent accumulators.
// Entries of T_s right of its diagonal are zeros, so summing whole vectors
// is exact.
func triInvAcc(dst, tm, nr []float32, n, j0, r int) {
	if !simdEnabled || len(dst) != 64 || r <= j0 {
		triInvAccGeneric(dst, tm, nr, n, j0, r)
		return
	}
	_ = tm[(r-1)*n+j0+63]
	_ = nr[r-1]
	var a0, a1, a2, a3 vec
	pt, pn := unsafe.Pointer(&tm[j0*n+j0]), unsafe.Pointer(&nr[j0])
	st := uintptr(4 * n)
	for s := j0; s < r; s++ {
		x := archsimd.BroadcastFloat32x16(*(*float32)(pn))
		a0 = archsimd.LoadFloat32x16((*[16]float32)(pt)).MulAdd(x, a0)
		a1 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pt, 64))).MulAdd(x, a1)
		a2 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pt, 128))).MulAdd(x, a2)
		a3 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pt, 192))).MulAdd(x, a3)
		if s+1 < r {
			pt, pn = unsafe.Add(pt, st), unsafe.Add(pn, 4)
		}
	}
	d := (*[64]float32)(dst)
	var z vec
	z.Sub(a0).Store((*[16]float32)(d[0:16]))
	z.Sub(a1).Store((*[16]float32)(d[16:32]))
	z.Sub(a2).Store((*[16]float32)(d[32:48]))
	z.Sub(a3).Store((*[16]float32)(d[48:64]))
}
