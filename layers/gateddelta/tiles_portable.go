package gateddelta

import (
	"math"
	"sync"

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
// columns [j0,j1) of C. It packs B into k-major panels of 4 columns
// (zero-padded at the edge) and, when A is read transposed, packs each A
// row; then each 1×4 block of C is a dot product of the A row with a
// panel, four accumulators in registers over the whole k loop. (Larger
// register blocks run slower in Go: the compiler issues all the products
// first and spills them.)
func gemmPortable(i0, i1, j0, j1, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	m, n := i1-i0, j1-j0
	if m <= 0 || n <= 0 {
		return
	}
	quads := (n + 3) / 4
	buf := packPool.Get().(*[]float32)
	defer packPool.Put(buf)
	*buf = grow(*buf, 4*quads*k+k)
	bp, arow := (*buf)[:4*quads*k], (*buf)[4*quads*k:]
	for jq := 0; jq < quads; jq++ {
		dst := bp[4*jq*k : 4*(jq+1)*k]
		j := j0 + 4*jq
		w := min(4, j1-j)
		for p := 0; p < k; p++ {
			d := dst[4*p : 4*p+4]
			copy(d, b[p*ldb+j:p*ldb+j+w])
			clear(d[w:])
		}
	}
	for i := i0; i < i1; i++ {
		kk, jEnd := k, j1
		if tri == triLowerA {
			kk = min(k, i+1)
		}
		if tri == triLowerC {
			jEnd = min(j1, i+1)
		}
		var ar []float32
		if aks == 1 {
			ar = a[i*lda : i*lda+kk]
		} else {
			ar = arow[:kk]
			for p := range ar {
				ar[p] = a[i*lda+p*aks]
			}
		}
		al := alpha
		if rs != nil {
			al *= rs[i]
		}
		for j := j0; j < jEnd; j += 4 {
			jq := (j - j0) / 4
			c0, c1, c2, c3 := dot1x4(ar, bp[4*jq*k:4*(jq+1)*k])
			storeRow(c[i*ldc+j:i*ldc+min(j+4, j1)], [4]float32{c0, c1, c2, c3}, al, beta)
		}
	}
}

// packPool holds gemmPortable's packing buffers.
var packPool = sync.Pool{New: func() any { return new([]float32) }}

// dot1x4 returns the products of an A row (len(a) steps) with a packed
// B panel (4 floats per step).
func dot1x4(a, bp []float32) (c0, c1, c2, c3 float32) {
	bp = bp[:4*len(a)]
	for p, x := range a {
		b := (*[4]float32)(bp[4*p:])
		c0 += x * b[0]
		c1 += x * b[1]
		c2 += x * b[2]
		c3 += x * b[3]
	}
	return
}

// storeRow writes c = beta·c + al·x over len(c) ≤ 4, not reading c when
// beta is 0.
func storeRow(c []float32, x [4]float32, al, beta float32) {
	for j := range c {
		if beta == 0 {
			c[j] = al * x[j]
		} else {
			c[j] = beta*c[j] + al*x[j]
		}
	}
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
