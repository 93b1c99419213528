// Package norm holds the normalisations of Qwen3.5: the block norms, the
// GDN output norm and the L2 norm of the GDN q and k.
//
// All three compute in float32 with the reduction accumulated in float64
// (vecmath.SumSquares: AVX-512, AVX2 or NEON where the CPU has them), which
// keeps them within rounding of transformers' float32 results. The scaling
// loops are plain Go with the bounds checks hoisted. Rows are independent,
// so a long input is split over the cores by whole rows (parallel.Rows):
// the result is the same, bit for bit, on any number of threads.
package norm

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/internal/vecmath"
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
	parallel.Rows(len(x)/dim, dim, func(lo, hi int) {
		for r := lo * dim; r < hi*dim; r += dim {
			xr, yr, w := x[r:r+dim], y[r:r+dim], w[:dim] // equal lengths: no bounds checks below
			inv := invRMS(xr, eps)
			for i, v := range xr {
				yr[i] = v * inv * (1 + w[i])
			}
		}
	})
	return nil
}

// GatedRMSNorm is the GDN output norm (Qwen3_5RMSNormGated): per row of
// length len(w), y = (w ⊙ x·rsqrt(mean(x²)+eps)) · silu(z). The weight is a
// plain scale (not 1+w) and the norm comes before the gate. It calls silu
// once per value; GatedRMSNormSiLU is the same norm with the vector SiLU.
func GatedRMSNorm(y, x, z, w []float32, eps float32, silu func(float32) float32) error {
	if err := checkGated(y, x, z, w); err != nil {
		return err
	}
	dim := len(w)
	parallel.Rows(len(x)/dim, dim, func(lo, hi int) {
		for r := lo * dim; r < hi*dim; r += dim {
			xr, yr, zr := x[r:r+dim], y[r:r+dim], z[r:r+dim]
			inv := invRMS(xr, eps)
			for i, v := range xr {
				yr[i] = w[i] * (v * inv) * silu(zr[i])
			}
		}
	})
	return nil
}

// GatedRMSNormSiLU is GatedRMSNorm with SiLU from internal/vecmath's
// vector kernels (relative error ≤ 6e-7 against the float64-exact SiLU).
// y may alias x or z.
func GatedRMSNormSiLU(y, x, z, w []float32, eps float32) error {
	if err := checkGated(y, x, z, w); err != nil {
		return err
	}
	dim := len(w)
	parallel.Rows(len(x)/dim, dim, func(lo, hi int) {
		var gate [256]float32 // SiLU(z) a piece at a time, so y may alias x or z
		for r := lo * dim; r < hi*dim; r += dim {
			xr, yr, zr := x[r:r+dim], y[r:r+dim], z[r:r+dim]
			inv := invRMS(xr, eps)
			for i0 := 0; i0 < dim; i0 += len(gate) {
				n := min(len(gate), dim-i0)
				g := gate[:n]
				vecmath.SiLU(g, zr[i0:i0+n])
				xs, ys, ws := xr[i0:i0+n], yr[i0:i0+n:i0+n], w[i0:i0+n:i0+n]
				for i, v := range xs {
					ys[i] = ws[i] * (v * inv) * g[i]
				}
			}
		}
	})
	return nil
}

func checkGated(y, x, z, w []float32) error {
	dim := len(w)
	if dim == 0 || len(x)%dim != 0 || len(y) != len(x) || len(z) != len(x) {
		return fmt.Errorf("norm: gated x has %d values, y %d, z %d, weight %d", len(x), len(y), len(z), dim)
	}
	return nil
}

// L2Normalize scales each row of length dim to unit L2 norm with eps added
// to the sum of squares (not the mean): x / sqrt(Σx² + eps), as the GDN
// core does to q and k. y and x may alias.
func L2Normalize(y, x []float32, dim int, eps float32) error {
	if dim <= 0 || len(x)%dim != 0 || len(y) != len(x) {
		return fmt.Errorf("norm: l2 x has %d values, y %d, dim %d", len(x), len(y), dim)
	}
	parallel.Rows(len(x)/dim, dim, func(lo, hi int) {
		for r := lo * dim; r < hi*dim; r += dim {
			xr, yr := x[r:r+dim], y[r:r+dim:r+dim]
			inv := float32(1 / math.Sqrt(vecmath.SumSquares(xr)+float64(eps)))
			for i, v := range xr {
				yr[i] = v * inv
			}
		}
	})
	return nil
}

func invRMS(x []float32, eps float32) float32 {
	return float32(1 / math.Sqrt(vecmath.SumSquares(x)/float64(len(x))+float64(eps)))
}
