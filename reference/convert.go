package reference

import "math"

// Widen returns x converted to float64 (exactly: every float32 is a float64).
func Widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// Narrow returns x rounded to the nearest float32.
func Narrow(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// RelL2 returns ‖got−want‖₂/‖want‖₂ with got in float32 and want in float64,
// the measure the tests and `qwenref golden` use to compare a float32
// kernel with the reference. A zero want gives ‖got‖₂; a length mismatch or
// a non-finite difference gives +Inf, so a comparison fails.
func RelL2(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
	}
	if math.IsNaN(num) || math.IsInf(num, 0) {
		return math.Inf(1)
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}
