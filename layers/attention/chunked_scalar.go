package attention

import "math"

// The portable kernels. They run in builds without GOEXPERIMENT=simd and on
// machines without AVX-512; chunked_simd.go swaps in vector versions.
var (
	gemm         = gemmScalar
	softmaxBlock = softmaxBlockScalar
	scaleRow     = scaleRowScalar
)

// gemmScalar computes, for r < rows and lanes i < lanes,
//
//	c[r·ldc+i] = cv[i]·c[r·ldc+i] + Σ_{k<kdim} a[r·ars+k·aks] · b[k·ldb+i]
//
// with the cv term left out (c overwritten) when cv is nil. The strided A
// serves both products of a tile with no packing: key rows against Qᵀ, and
// probabilities (read down Sᵀ) against value rows. laneOuter is a loop
// order hint for the vector version and changes nothing here.
func gemmScalar(rows, kdim int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, lanes int, cv []float32, laneOuter bool) {
	for r := range rows {
		cr := c[r*ldc : r*ldc+lanes]
		if cv != nil {
			for i := range cr {
				cr[i] *= cv[i]
			}
		} else {
			clear(cr)
		}
		for kk := range kdim {
			x := a[r*ars+kk*aks]
			br := b[kk*ldb : kk*ldb+lanes]
			cr := cr[:len(br)] // same length: no bounds checks in the loop
			for i, y := range br {
				cr[i] += x * y
			}
		}
	}
}

// scaleRowScalar multiplies r by c in place.
func scaleRowScalar(r []float32, c float32) {
	for i := range r {
		r[i] *= c
	}
}

// softmaxBlockScalar is one online-softmax step over a block of scores
// st [jn][mp] (jn = len(st)/mp), lane i being one query row:
//
//	m' = max(m, max_j st[j]),  corr = e^(m−m'),  st[j] ← e^(st[j]−m'),
//	l ← l·corr + Σ_j st[j],   m ← m'.
//
// Masked scores are −Inf and become 0. Block 0 always holds key 0, which
// every row sees, so m is finite from then on and corr = e^−Inf = 0 there.
func softmaxBlockScalar(st []float32, mp int, m, l, corr []float32) {
	jn := len(st) / mp
	for i := range mp {
		mx := m[i]
		for j := range jn {
			mx = max(mx, st[j*mp+i])
		}
		var sum float32
		for j := range jn {
			p := expFast(st[j*mp+i] - mx)
			st[j*mp+i] = p
			sum += p
		}
		corr[i] = expFast(m[i] - mx)
		l[i] = l[i]*corr[i] + sum
		m[i] = mx
	}
}

// Constants of the float32 exponential (shared with the vector version).
const (
	log2e = math.Log2E
	// ln2Hi has 9 significant bits, so n·ln2Hi is exact for |n| < 2^15
	// and x − n·ln2Hi loses nothing; ln2Lo carries the rest of ln 2.
	ln2Hi = 0.693359375
	ln2Lo = math.Ln2 - ln2Hi
	// expLo is where e^x drops below the smallest normal float32; softmax
	// arguments are ≤ 0, and anything below expLo counts as 0 (against a
	// row sum ≥ 1 that is far below float32 resolution).
	expLo = -87.33
)

// expCoef are the Taylor coefficients 1/k! for k = 7 down to 1. On the
// reduced range |r| ≤ ln2/2 the first omitted term, r^8/8!, is below 5.3e-9
// relative: under float32 rounding, so no minimax fit is needed.
var expCoef = [7]float32{1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1}

// expFast returns e^x in float32 to a few ulps for x ≤ 0 (the softmax
// range): x = n·ln2 + r, e^r from the Taylor polynomial, 2^n put into the
// exponent. Below expLo, −Inf included, it returns 0. NaN stays NaN.
func expFast(x float32) float32 {
	if x < expLo {
		return 0
	}
	x = min(x, 0)
	n := float32(math.RoundToEven(float64(x * log2e)))
	r := x - n*ln2Hi
	r -= n * float32(ln2Lo)
	p := expCoef[0]
	for _, c := range expCoef[1:] {
		p = p*r + c
	}
	p = p*r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}
