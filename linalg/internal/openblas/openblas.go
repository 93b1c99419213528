//go:build openblas && cgo

package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import (
	"fmt"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// SgemmNT computes y[M,N] = x[M,K]·Wᵀ through cblas_sgemm, for float32 W.
// OpenBLAS runs its own threads (OPENBLAS_NUM_THREADS, default all cores).
type SgemmNT struct{}

// MatMulT implements linalg.MatMuler.
func (SgemmNT) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := linalg.CheckDims(y, x, m, w); err != nil {
		return err
	}
	if w.F32 == nil {
		return fmt.Errorf("openblas: only float32 weights")
	}
	n, k := w.Rows, w.Cols
	if m == 0 || n == 0 || k == 0 {
		clear(y)
		return nil
	}
	C.cblas_sgemm(C.CblasRowMajor, C.CblasNoTrans, C.CblasTrans, C.blasint(m), C.blasint(n), C.blasint(k),
		1, (*C.float)(&x[0]), C.blasint(k), (*C.float)(&w.F32[0]), C.blasint(k),
		0, (*C.float)(&y[0]), C.blasint(n))
	return nil
}
