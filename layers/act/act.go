// Package act holds the scalar activations of Qwen3.5, written to match
// PyTorch's float32 definitions.
package act

import "math"

// Sigmoid is σ(x) = 1/(1+e^−x), evaluated without overflow for large |x|.
func Sigmoid(x float32) float32 {
	if x >= 0 {
		return float32(1 / (1 + math.Exp(-float64(x))))
	}
	e := math.Exp(float64(x))
	return float32(e / (1 + e))
}

// SiLU is x·σ(x) (a.k.a. swish), the activation of the conv, the gated norm
// and the MLP.
func SiLU(x float32) float32 { return x * Sigmoid(x) }

// Softplus is PyTorch's F.softplus with β=1 and threshold 20: log(1+e^x),
// and x itself once x > 20 (where the two agree to float32 precision).
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}
