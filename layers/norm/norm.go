// Package norm holds the normalisations of Qwen3.5 (spec §3.2, §3.3 step 6-7).
//
// All three compute in float32 with the reduction accumulated in float64,
// which keeps them within rounding of transformers' float32 results.
package norm

import (
	"fmt"
	"math"
)

// RMSNormOnePlus is the zero-centred RMSNorm of every Qwen3.5 block:
// y = x · rsqrt(mean(x²) + eps) · (1 + w), over rows of length len(w).
// The (1+w) multiply happens in float32 before any cast (the Gemma order).
// y and x may alias.
func RMSNormOnePlus(y, x, w []float32, eps float32) error {
	dim := len(w)
	if dim == 0 || len(x)%dim != 0 || len(y) != len(x) {
		return fmt.Errorf("norm: x has %d values, y %d, weight %d", len(x), len(y), dim)
	}
	for r := 0; r < len(x); r += dim {
		xr, yr := x[r:r+dim], y[r:r+dim]
		inv := invRMS(xr, eps)
		for i, v := range xr {
			yr[i] = v * inv * (1 + w[i])
		}
	}
	return nil
}

// GatedRMSNorm is the GDN output norm (Qwen3_5RMSNormGated): per row of
// length len(w), y = (w ⊙ x·rsqrt(mean(x²)+eps)) · SiLU(z). The weight is a
// plain scale (not 1+w) and the norm comes before the gate.
func GatedRMSNorm(y, x, z, w []float32, eps float32, silu func(float32) float32) error {
	dim := len(w)
	if dim == 0 || len(x)%dim != 0 || len(y) != len(x) || len(z) != len(x) {
		return fmt.Errorf("norm: gated x has %d values, y %d, z %d, weight %d", len(x), len(y), len(z), dim)
	}
	for r := 0; r < len(x); r += dim {
		xr, yr, zr := x[r:r+dim], y[r:r+dim], z[r:r+dim]
		inv := invRMS(xr, eps)
		for i, v := range xr {
			yr[i] = w[i] * (v * inv) * silu(zr[i])
		}
	}
	return nil
}

// L2Normalize scales each row of length dim to unit L2 norm with eps added
// to the sum of squares (not the mean): x / sqrt(Σx² + eps), as the GDN
// core does to q and k (spec §3.3 step 6). y and x may alias.
func L2Normalize(y, x []float32, dim int, eps float32) error {
	if dim <= 0 || len(x)%dim != 0 || len(y) != len(x) {
		return fmt.Errorf("norm: l2 x has %d values, y %d, dim %d", len(x), len(y), dim)
	}
	for r := 0; r < len(x); r += dim {
		xr, yr := x[r:r+dim], y[r:r+dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss+float64(eps)))
		for i, v := range xr {
			yr[i] = v * inv
		}
	}
	return nil
}

func invRMS(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}
