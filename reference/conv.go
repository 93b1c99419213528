package reference

import (
	"fmt"
	"math"
)

// CausalConvSiLU is the causal depthwise convolution over time followed by
// SiLU, in float64, with the layouts of conv1d.Kernel:
//
//   - x [T, C]: inputs, channel fastest; w [C, K]: taps, w[c*K+K−1]
//     multiplies the current token;
//   - state [K, C]: the K inputs before x (zeros at a sequence start); on
//     return the last K rows of [state; x];
//   - y [T, C] = SiLU(Σ_j w[c,j]·m[t−(K−1)+j, c]).
func CausalConvSiLU(y, x []float64, t, c int, w []float64, k int, state []float64) error {
	if t < 0 || c <= 0 || k <= 0 {
		return fmt.Errorf("reference conv: bad dims T=%d C=%d K=%d", t, c, k)
	}
	dims := struct{ T, C, K int }{t, c, k}
	if err := checkLens("conv", dims, []lenCheck{
		{"x", len(x), t * c}, {"y", len(y), t * c}, {"w", len(w), c * k}, {"state", len(state), k * c},
	}); err != nil {
		return err
	}
	// hist is [state; x] as one [K+T, C] sequence: row K+τ holds m[τ].
	hist := make([]float64, (k+t)*c)
	copy(hist, state)
	copy(hist[k*c:], x)
	for ti := 0; ti < t; ti++ {
		for ch := 0; ch < c; ch++ {
			var u float64
			for j := 0; j < k; j++ {
				// m[t−(K−1)+j] sits at row K + t−(K−1)+j = t+1+j.
				u += w[ch*k+j] * hist[(ti+1+j)*c+ch]
			}
			y[ti*c+ch] = SiLU(u)
		}
	}
	copy(state, hist[t*c:])
	return nil
}

// SiLU is u·σ(u) = u/(1+e^−u), evaluated without overflow.
func SiLU(u float64) float64 {
	if u >= 0 {
		return u / (1 + math.Exp(-u))
	}
	e := math.Exp(u)
	return u * e / (1 + e)
}
