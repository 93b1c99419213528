package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/tensor"
)

// DTypes are the input dtypes a test vector can be written in.
var DTypes = []string{"f32", "bf16", "f16"}

// RoundTo rounds every value of x in place to the nearest value of dtype
// (ties to even), so a float64 reference computed from x afterwards is the
// exact answer for the inputs a kernel of that dtype is handed.
func RoundTo(dtype string, x []float32) error {
	switch dtype {
	case "f32":
	case "bf16":
		for i, v := range x {
			x[i] = tensor.BF16ToFloat32(tensor.Float32ToBF16(v))
		}
	case "f16":
		for i, v := range x {
			x[i] = RoundF16(v)
		}
	default:
		return fmt.Errorf("unknown dtype %q (dtypes: f32, bf16, f16)", dtype)
	}
	return nil
}

// RoundF16 rounds f to the nearest IEEE binary16 value, ties to even;
// beyond the largest (65504) it gives ±Inf, as a cast does.
func RoundF16(f float32) float32 {
	x := float64(f)
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return f
	}
	if math.Abs(x) >= 65520 {
		return float32(math.Copysign(math.Inf(1), x))
	}
	_, e := math.Frexp(math.Abs(x)) // |x| = frac·2^e, frac in [0.5, 1)
	e = max(e-1, -14)               // subnormals share the spacing 2^-24
	q := math.Ldexp(1, e-10)
	return float32(math.RoundToEven(x/q) * q)
}
