package conv1d

import "fmt"

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
	Forward(y, x []float32, t, c int, w []float32, k int, state []float32) error
}

// CheckDims validates the slice lengths of a Forward call.
func CheckDims(y, x []float32, t, c int, w []float32, k int, state []float32) error {
	switch {
	case t < 0 || c <= 0 || k <= 0:
		return fmt.Errorf("conv1d: bad dims T=%d C=%d K=%d", t, c, k)
	case len(x) != t*c || len(y) != t*c:
		return fmt.Errorf("conv1d: x has %d and y %d values, want T·C = %d", len(x), len(y), t*c)
	case len(w) != c*k:
		return fmt.Errorf("conv1d: w has %d values, want C·K = %d", len(w), c*k)
	case len(state) != k*c:
		return fmt.Errorf("conv1d: state has %d values, want K·C = %d", len(state), k*c)
	}
	return nil
}
