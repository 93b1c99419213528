// Package act holds the activations of Qwen3.5: scalar forms written to
// match PyTorch's float32 definitions (evaluated in float64, so they are
// the reference), and fast slice forms for the hot loops.
package act

import (
	"math"

	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/internal/vecmath"
)

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

// SiLUMul sets dst[i] = SiLU(gate[i])·up[i], the gated MLP's product, with
// internal/vecmath's vector kernels (relative error ≤ 6e-7 against the
// scalar SiLU's float64-exact value). dst may be gate or up; up must be as
// long as gate. A long slice is split over the cores (pieces of a multiple
// of the vector width, so the values do not depend on the thread count).
func SiLUMul(dst, gate, up []float32) {
	dst, up = dst[:len(gate)], up[:len(gate)]
	parallel.Rows(len(gate), 1, func(lo, hi int) { vecmath.SiLUMul(dst[lo:hi], gate[lo:hi], up[lo:hi]) })
}

// MulSigmoid sets dst[i] = x[i]·σ(gate[i]), the attention output gate, with
// internal/vecmath's vector kernels (relative error ≤ 6e-7). dst may be x
// or gate; gate must be as long as x. Split over the cores as SiLUMul is.
func MulSigmoid(dst, x, gate []float32) {
	dst, gate = dst[:len(x)], gate[:len(x)]
	parallel.Rows(len(x), 1, func(lo, hi int) { vecmath.MulSigmoid(dst[lo:hi], x[lo:hi], gate[lo:hi]) })
}
