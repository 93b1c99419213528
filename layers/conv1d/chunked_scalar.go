package conv1d

import "math"

// The portable kernels. They run in builds without GOEXPERIMENT=simd and on
// machines without AVX-512; chunked_simd.go swaps in vector versions.
var (
	convRow4      = convRow4Scalar
	convRowK      = convRowKScalar
	transposeTaps = transposeTapsScalar
	// convRows4x4, when set, computes four K = 4 output rows at once from
	// the seven input rows they read (see chunked_simd.go).
	convRows4x4 func(y, x []float32, c int, wt []float32)
)

// convRow4Scalar computes y[i] = SiLU(w0·r0 + w1·r1 + w2·r2 + w3·r3) at
// every i, summing left to right exactly as Naive does.
func convRow4Scalar(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32) {
	n := len(y)
	r0, r1, r2, r3 = r0[:n], r1[:n], r2[:n], r3[:n]
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for i := range y {
		y[i] = siluFast(w0[i]*r0[i] + w1[i]*r1[i] + w2[i]*r2[i] + w3[i]*r3[i])
	}
}

// convRowKScalar is convRow4Scalar for any K: rows[j] feeds tap j, whose
// values are wt[j·ws : j·ws+len(y)].
func convRowKScalar(y []float32, rows [][]float32, wt []float32, ws int) {
	for i := range y {
		var u float32
		for j, r := range rows {
			u += wt[j*ws+i] * r[i]
		}
		y[i] = siluFast(u)
	}
}

// Constants of the float32 exponential (shared with the vector version).
const (
	log2e = math.Log2E
	// ln2Hi has 9 significant bits, so n·ln2Hi is exact for |n| < 2^15
	// and x − n·ln2Hi loses nothing; ln2Lo carries the rest of ln 2.
	ln2Hi = 0.693359375
	ln2Lo = math.Ln2 - ln2Hi
	// expLo and expHi bound the argument: e^expLo is the smallest normal
	// float32 and e^expHi is below the largest, so 2^n stays a normal number.
	expLo = -87.33
	expHi = 88.0
)

// expCoef are the Taylor coefficients 1/k! for k = 7 down to 1. On the
// reduced range |r| ≤ ln2/2 the first omitted term, r^8/8!, is below 5.3e-9
// relative: under float32 rounding, so no minimax fit is needed.
var expCoef = [7]float32{1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1}

// expFast returns e^x in float32 to a few ulps: x = n·ln2 + r with n an
// integer, e^r from the Taylor polynomial, and 2^n put into the exponent.
// Arguments below expLo give 0, above expHi give e^expHi.
func expFast(x float32) float32 {
	if x < expLo {
		return 0
	}
	x = min(x, expHi)
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

// siluFast is u / (1 + e^−u) with expFast. For u < −88 the exponential
// saturates and the result is a tiny number near zero, as it should be.
func siluFast(u float32) float32 {
	return u / (1 + expFast(-u))
}
