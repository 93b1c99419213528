package conv1d

import "math"

// Naive is the reference convolution: a plain loop over (t, c) that reads
// like docs/spec.md §3.3 step 2. It is slow and obviously right.
type Naive struct{}

// Forward implements Kernel.
func (Naive) Forward(y, x, w []float32, d Dims, state []float32) error {
	if err := d.Check(y, x, w, state); err != nil {
		return err
	}
	t, c, k := d.T, d.C, d.K
	// m returns the pre-conv input at time tau: x for tau ≥ 0, otherwise the
	// state, whose row K+tau holds m[tau] (docs/spec.md §3.4: the cache keeps the
	// last K inputs; the sequence start is all zeros).
	m := func(tau, ch int) float32 {
		if tau < 0 {
			return state[(k+tau)*c+ch]
		}
		return x[tau*c+ch]
	}
	for ti := 0; ti < t; ti++ {
		for ch := 0; ch < c; ch++ {
			// u[t,c] = Σ_j w[c,j]·m[t−(K−1)+j, c]; tap K−1 is the current token.
			var u float32
			for j := 0; j < k; j++ {
				u += w[ch*k+j] * m(ti-(k-1)+j, ch)
			}
			y[ti*c+ch] = SiLU(u)
		}
	}
	// state ← last K rows of [state; x] (transformers' update_conv_state and
	// causal_conv1d_update keep the last K columns). Built aside first,
	// because the new rows may come from the old state.
	next := make([]float32, k*c)
	for i := 0; i < k; i++ {
		tau := t - k + i
		for ch := 0; ch < c; ch++ {
			next[i*c+ch] = m(tau, ch)
		}
	}
	copy(state, next)
	return nil
}

// SiLU returns u·σ(u) = u / (1 + e^−u), evaluated in float64 in a form
// that never overflows: for u < 0 it uses u·e^u / (1 + e^u), so the
// exponential is always of a non-positive number. SiLU(±Inf) = ±Inf, 0.
func SiLU(u float32) float32 {
	v := float64(u)
	e := math.Exp(-math.Abs(v)) // in [0, 1]
	switch {
	case v >= 0:
		return float32(v / (1 + e))
	case e == 0:
		return 0 // u·e^u underflowed; this also avoids −Inf·0
	}
	return float32(v * e / (1 + e))
}
