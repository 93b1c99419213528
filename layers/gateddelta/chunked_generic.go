package gateddelta

import "math"

// Portable versions of the small dense kernels the chunked and fused
// recurrent paths are built from. The archsimd build (chunked_simd.go)
// replaces the hot ones on AVX-512 machines and falls back to these for
// edge tiles; the plain build (chunked_nosimd.go) uses them throughout.

// triMode tells gemm which part of a square product is structurally zero
// or unwanted, so the triangular products of the chunk step skip work.
type triMode int

const (
	triNone   triMode = iota
	triLowerA         // A[i][p] == 0 for p > i: row i reads only p ≤ i
	triLowerC         // only C[i][j] for j ≤ i is wanted; others may hold anything finite
)

// gemmGeneric computes C = beta·C + alpha·diag(rs)·A·B for an m×n C (row
// stride ldc), an m×k A addressed as a[i*lda + p*aks] (so aks = lda,
// lda = 1 reads Aᵀ of a row-major matrix) and a k×n B (row stride ldb).
// rs, if not nil, scales row i of the product by rs[i] (a diagonal factor
// folded into the write-back instead of into a scaled copy of A). beta == 0
// never reads C, so C may hold garbage. tri restricts the work as
// documented on triMode; the results it promises are exact, the rest is
// unspecified.
func gemmGeneric(m, n, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	gemmGenericRange(0, m, 0, n, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
}

// gemmGenericRange is gemmGeneric restricted to rows [i0,i1) and columns
// [j0,j1) of C; the SIMD build uses it for edge tiles.
func gemmGenericRange(i0, i1, j0, j1, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	acc := make([]float32, j1-j0)
	for i := i0; i < i1; i++ {
		kk, jj := k, j1
		if tri == triLowerA {
			kk = min(k, i+1)
		}
		if tri == triLowerC {
			jj = min(j1, i+1)
		}
		if jj <= j0 {
			continue
		}
		acc := acc[:jj-j0]
		clear(acc)
		for p := 0; p < kk; p++ {
			aip := a[i*lda+p*aks]
			brow := b[p*ldb+j0 : p*ldb+jj]
			for j, bv := range brow {
				acc[j] += aip * bv
			}
		}
		crow := c[i*ldc+j0 : i*ldc+jj]
		al := alpha
		if rs != nil {
			al *= rs[i]
		}
		if beta == 0 {
			for j := range crow {
				crow[j] = al * acc[j]
			}
		} else {
			for j := range crow {
				crow[j] = beta*crow[j] + al*acc[j]
			}
		}
	}
}

// expAffineGeneric sets dst[i] = exp(a + b·src[i]). The exponent is
// formed in float64 because the callers pass differences of cumulative
// log-decays, which can be large numbers whose difference is small; it is
// clamped to ±expClamp so no Inf can appear (callers mask what they do not
// want, and the contract g ≤ 0 keeps the wanted values ≤ 1 anyway).
func expAffineGeneric(dst []float32, src []float64, a, b float64) {
	for i, s := range src[:len(dst)] {
		x := max(min(a+b*s, expClamp), -expClamp)
		dst[i] = float32(math.Exp(x))
	}
}

// expClamp bounds exponents: e^±88 is still a finite float32.
const expClamp = 88

// axpyGeneric sets y += a·x over len(y).
func axpyGeneric(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// scaleCopyGeneric sets dst = a·src over len(dst).
func scaleCopyGeneric(dst, src []float32, a float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] = a * src[i]
	}
}

// recBlockGeneric runs the fused recurrence (see recurrentGroup) over all
// n tokens for one column block of w state columns: s is the dk×w block
// (row stride lds), q/k rows have stride ldqk, v/out rows have stride ldv
// and start at this block's first column.
func recBlockGeneric(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	y := make([]float32, w)
	o := make([]float32, w)
	dl := make([]float32, w)
	// Prologue: y = S̃ᵀ k̂ for the first token.
	for i := 0; i < dk; i++ {
		axpyGeneric(y, k[i], s[i*lds:i*lds+w])
	}
	for t := 0; t < n; t++ {
		vt := v[t*ldv : t*ldv+w]
		// δ′ = β(v − c′·y)/c: the prediction error, in S̃'s scale.
		ys, bd := sc.yScale[t], sc.betaD[t]
		for j := range dl {
			dl[j] = (vt[j] - ys*y[j]) * bd
		}
		rho := sc.rho[t]
		kt, qt := k[t*ldqk:t*ldqk+dk], q[t*ldqk:t*ldqk+dk]
		var kn []float32
		if t+1 < n {
			kn = k[(t+1)*ldqk : (t+1)*ldqk+dk]
		}
		clear(o)
		clear(y)
		for i := 0; i < dk; i++ {
			row := s[i*lds : i*lds+w]
			ki, qi := kt[i], qt[i]
			for j := range row {
				sv := rho*row[j] + ki*dl[j] // S̃ ← ρS̃ + k̂ δ′ᵀ
				row[j] = sv
				o[j] += qi * sv // o = S̃ᵀ q̂
			}
			if kn != nil {
				axpyGeneric(y, kn[i], row) // next token's S̃ᵀ k̂
			}
		}
		os := sc.oScale[t]
		ot := out[t*ldv : t*ldv+w]
		for j := range ot {
			ot[j] = os * o[j]
		}
	}
}

// mulScaledGeneric sets dst = a·(x ⊙ y) over len(dst).
func mulScaledGeneric(dst, x, y []float32, a float32) {
	x, y = x[:len(dst)], y[:len(dst)]
	for i := range dst {
		dst[i] = a * x[i] * y[i]
	}
}

// unitLowerInverse overwrites the strictly lower n×n matrix N (row-major,
// zeros on and above the diagonal) with T = (I + N)⁻¹, which is unit lower
// triangular, by forward substitution: T_r = e_r − Σ_{s<r} N_rs T_s, row
// by row (row r of N is read whole before T_r replaces it). n is a
// multiple of 16 and tmp holds n floats.
func unitLowerInverse(tm, tmp []float32, n int) {
	for r := 0; r < n; r++ {
		tr := tm[r*n : (r+1)*n]
		// Columns are done 64 at a time; T_s vanishes right of its
		// diagonal, so columns [j0, …) only need rows s ≥ j0.
		for j0 := 0; j0 < r; j0 += 64 {
			triInvAcc(tmp[j0:min(j0+64, n)], tm, tr, n, j0, r)
		}
		copy(tr[:r], tmp[:r])
		tr[r] = 1 // before any later row reads T_r
	}
}

// triInvAccGeneric sets dst = −Σ_{s=j0}^{r−1} N_rs · T_s[j0:j0+len(dst)],
// with N_rs = nr[s] and T_s the row s of tm (row stride n).
func triInvAccGeneric(dst, tm, nr []float32, n, j0, r int) {
	clear(dst)
	for s := j0; s < r; s++ {
		axpyGeneric(dst, -nr[s], tm[s*n+j0:])
	}
}
