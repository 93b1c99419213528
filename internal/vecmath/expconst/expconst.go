// Package expconst holds the constants of qwenref's float32 exponential,
// shared by package vecmath (the scalar and Go forms) and by the assembly
// generators through internal/vecmath/emit, which must not import vecmath
// itself (it needs the assembly they write).
package expconst

import "math"

// The range reduction: e^x = 2^n·e^r with n = round(x·Log2E) and
// r = x − n·Ln2Hi − n·Ln2Lo.
const (
	Log2E = math.Log2E
	// Ln2Hi has 9 significant bits, so n·Ln2Hi is exact for |n| < 2^15 and
	// x − n·Ln2Hi loses nothing; Ln2Lo carries the rest of ln 2.
	Ln2Hi = 0.693359375
	Ln2Lo = math.Ln2 - Ln2Hi
	// Underflow is where e^x comes within 0.7% of the smallest normal
	// float32 (e^−87.3365); below it the result is 0 (or, on AVX-512, a
	// subnormal).
	Underflow = -87.33
	// Overflow is the largest float32 x with e^x ≤ MaxFloat32; above it
	// the result is +Inf.
	Overflow = 88.72283172607422
)

// Coef are the Taylor coefficients 1/k! for k = 7 down to 1 (the constant
// term 1 is added last). On |r| ≤ ln2/2 the first omitted term, r^8/8!, is
// below 5.3e-9 relative: under float32 rounding.
var Coef = [7]float32{1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1}
