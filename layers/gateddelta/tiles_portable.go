package gateddelta

import (
	"math"

	"github.com/qwenref/qwenref/internal/cpu"
)

// Portable versions of the small dense kernels the chunked and fused
// recurrent paths are built from: the whole set for cpu.Portable, the
// edge tiles and remainders for the assembly levels.

// portableKernels is the plain-Go set.
var portableKernels = &kernels{
	level:     cpu.Portable,
	gemmTail:  gemmPortable,
	expAffine: expAffinePortable,
	axpy:      axpyPortable,
	scaleCopy: scaleCopyPortable,
	mulScaled: mulScaledPortable,
	triInvAcc: triInvAccPortable,
	recWidths: []int{recPortableWidth},
	recBlock:  recBlockPortable,
	vecName:   "portable",
}

// gemmPortable is gemm (see kernels.gemm) restricted to rows [i0,i1) and
// columns [j0,j1) of C. It keeps a 2×4 block of C in registers over the
// whole k loop (8 accumulators, 4 B and 2 A values: within amd64's 16
// vector registers), so each step loads 6 values for 8 multiply-adds and
// nothing is stored until the end.
func gemmPortable(i0, i1, j0, j1, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	for i := i0; i < i1; i += 2 {
		two := i+1 < i1
		kk, jj := k, j1
		if tri == triLowerA {
			kk = min(k, i+2) // A[i][i+1] is an exact zero, so row i may read it
		}
		if tri == triLowerC {
			jj = min(j1, i+2)
		}
		a0 := a[i*lda:]
		a1 := a0
		if two {
			a1 = a[(i+1)*lda:]
		}
		al0, al1 := alpha, alpha
		if rs != nil {
			al0 = alpha * rs[i]
			if two {
				al1 = alpha * rs[i+1]
			}
		}
		j := j0
		for ; j+4 <= jj; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			pa, pb := 0, j
			for p := 0; p < kk; p++ {
				x0, x1 := a0[pa], a1[pa]
				bp := b[pb : pb+4 : pb+4]
				b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
				c00 += x0 * b0
				c01 += x0 * b1
				c02 += x0 * b2
				c03 += x0 * b3
				c10 += x1 * b0
				c11 += x1 * b1
				c12 += x1 * b2
				c13 += x1 * b3
				pa += aks
				pb += ldb
			}
			store4(c[i*ldc+j:], c00, c01, c02, c03, al0, beta)
			if two {
				store4(c[(i+1)*ldc+j:], c10, c11, c12, c13, al1, beta)
			}
		}
		for ; j < jj; j++ {
			var c0, c1 float32
			pa, pb := 0, j
			for p := 0; p < kk; p++ {
				bv := b[pb]
				c0 += a0[pa] * bv
				c1 += a1[pa] * bv
				pa += aks
				pb += ldb
			}
			store1(&c[i*ldc+j], c0, al0, beta)
			if two {
				store1(&c[(i+1)*ldc+j], c1, al1, beta)
			}
		}
	}
}

// store4 writes c[0:4] = beta·c + al·(x0…x3), not reading c when beta is 0.
func store4(c []float32, x0, x1, x2, x3, al, beta float32) {
	c = c[:4:4]
	if beta == 0 {
		c[0], c[1], c[2], c[3] = al*x0, al*x1, al*x2, al*x3
		return
	}
	c[0] = beta*c[0] + al*x0
	c[1] = beta*c[1] + al*x1
	c[2] = beta*c[2] + al*x2
	c[3] = beta*c[3] + al*x3
}

// store1 is store4 for one value.
func store1(c *float32, x, al, beta float32) {
	if beta == 0 {
		*c = al * x
		return
	}
	*c = beta**c + al*x
}

// expAffinePortable sets dst[i] = exp(a + b·src[i]). The exponent is
// formed in float64 because the callers pass differences of cumulative
// log-decays, which can be large numbers whose difference is small; it is
// clamped to ±expClamp so no Inf can appear (callers mask what they do not
// want, and the contract g ≤ 0 keeps the wanted values ≤ 1 anyway).
func expAffinePortable(dst []float32, src []float64, a, b float64) {
	for i, s := range src[:len(dst)] {
		x := max(min(a+b*s, expClamp), -expClamp)
		dst[i] = float32(math.Exp(x))
	}
}

// expClamp bounds exponents: e^±88 is still a finite float32.
const expClamp = 88

// axpyPortable sets y += a·x over len(y).
func axpyPortable(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// scaleCopyPortable sets dst = a·src over len(dst).
func scaleCopyPortable(dst, src []float32, a float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = a * src[i]
	}
}

// mulScaledPortable sets dst = a·(x ⊙ y) over len(dst).
func mulScaledPortable(dst, x, y []float32, a float32) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = a * x[i] * y[i]
	}
}

// triInvAccPortable sets dst = −Σ_{s=j0}^{r−1} N_rs · M_s[j0:j0+len(dst)],
// with N_rs = nr[s] and M_s the row s of tm (row stride n).
func triInvAccPortable(dst, tm, nr []float32, n, j0, r int) {
	clear(dst)
	for s := j0; s < r; s++ {
		axpyPortable(dst, -nr[s], tm[s*n+j0:])
	}
}
