package conv1d

import (
	"fmt"
	"math"
)

// Dims are the shapes of one convolution call for one sequence.
type Dims struct {
	T int // tokens
	C int // channels
	K int // taps (the kernel width)
}

// Kernel applies the causal depthwise convolution over time followed by
// SiLU, for one sequence. Naive, Chunked and the CUDA backend satisfy it.
//
//   - x [T, C]: pre-conv inputs m (row-major, channel fastest).
//   - w [C, K]: taps; w[c*K+K-1] multiplies the current token.
//   - state [K, C]: the K inputs that came before x (zeros at the start of a
//     sequence). On return it holds the last K rows of [state; x], which is
//     exactly transformers' conv_states transposed.
//   - y [T, C]: outputs SiLU(Σ_j w[c,j]·m[t−(K−1)+j, c]), written in full
//     (its old contents are arbitrary: layers lend pooled buffers).
type Kernel interface {
	Forward(y, x, w []float32, d Dims, state []float32) error
}

// Check validates the dims and the slice lengths of a Forward call.
func (d Dims) Check(y, x, w, state []float32) error {
	switch {
	case d.T < 0 || d.C <= 0 || d.K <= 0:
		return fmt.Errorf("conv1d: bad dims T=%d C=%d K=%d", d.T, d.C, d.K)
	case d.T > math.MaxInt/d.C || d.K > math.MaxInt/d.C:
		// Bounded first, so that no product wraps around and matches a
		// slice length by accident.
		return fmt.Errorf("conv1d: dims T=%d C=%d K=%d overflow", d.T, d.C, d.K)
	case len(x) != d.T*d.C || len(y) != d.T*d.C:
		return fmt.Errorf("conv1d: x has %d and y %d values, want T·C = %d", len(x), len(y), d.T*d.C)
	case len(w) != d.C*d.K:
		return fmt.Errorf("conv1d: w has %d values, want C·K = %d", len(w), d.C*d.K)
	case len(state) != d.K*d.C:
		return fmt.Errorf("conv1d: state has %d values, want K·C = %d", len(state), d.K*d.C)
	}
	return nil
}
