// Package linalg holds the dense products behind every projection:
// y[M,N] = x[M,K] · Wᵀ with W stored [N,K] (nn.Linear's [out, in] layout).
//
// Implementations share one interface: Naive, a per-output dot product
// that is the readable truth; Blocked, a cache-blocked packed GEMM that
// widens bf16 weights inside the kernel, with assembly kernels for the
// level internal/cpu selects (KernelInfo names them); and the bf16-compute
// product NewBF16Compute returns on CPUs with AVX512_BF16.
package linalg

import (
	"fmt"

	"github.com/qwenref/qwenref/tensor"
)

// MatMuler computes y[M,N] = x[M,K] · Wᵀ for a weight W of shape [N,K].
// y is overwritten. Implementations must be safe for concurrent use.
type MatMuler interface {
	MatMulT(y, x []float32, m int, w *tensor.Matrix) error
}

// CheckDims validates the slice lengths for y[M,N] = x[M,K] · Wᵀ.
func CheckDims(y, x []float32, m int, w *tensor.Matrix) error {
	if w == nil {
		return fmt.Errorf("linalg: nil weight")
	}
	if m < 0 || len(x) != m*w.Cols || len(y) != m*w.Rows {
		return fmt.Errorf("linalg: x has %d values, y %d, for M=%d and W [%d,%d] (want %d and %d)",
			len(x), len(y), m, w.Rows, w.Cols, m*w.Cols, m*w.Rows)
	}
	return nil
}

// Projection is one product y = x Wᵀ of a layer, recorded as Name.
type Projection struct {
	Y    []float32
	W    *tensor.Matrix
	Name string
}

// Project runs each projection of x [m, K] in turn and records its output
// when rec is set; an error names the layer and the projection.
func Project(mm MatMuler, x []float32, m int, rec tensor.Recorder, layer string, ps ...Projection) error {
	for _, p := range ps {
		if err := mm.MatMulT(p.Y, x, m, p.W); err != nil {
			return fmt.Errorf("%s %s: %w", layer, p.Name, err)
		}
		rec.Record(p.Name, p.Y, m, p.W.Rows)
	}
	return nil
}
