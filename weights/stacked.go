package weights

import (
	"math"

	"github.com/qwenref/qwenref/tensor"
)

// Stacked returns a rank-3 tensor [A, B, C] (a stack of A matrices, such
// as a mixture of experts' fused experts [E, 2I, H]) as one
// [A·B, C] matrix, zero-copy over the mapping for BF16 and F32 as Matrix
// is. Rows a·B … a·B+B−1 are matrix a.
func (s *Store) Stacked(name string) (*tensor.Matrix, error) {
	e, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	sh := e.info.Shape
	if len(sh) != 3 {
		return nil, e.errorf("shape %v is not a stack of matrices (want [A, B, C])", sh)
	}
	switch e.info.DType {
	case "BF16", "F32", "F16":
	default:
		return nil, e.errorf("dtype %s is not supported for a matrix (want BF16, F16 or F32)", e.info.DType)
	}
	// A tensor with a zero dim holds no bytes whatever its other dims, so
	// the header allows [3, 2⁶², 0]; its A·B must still not wrap around.
	rows, ok := mulChecked(uint64(sh[0]), uint64(sh[1]))
	if !ok || rows > math.MaxInt {
		return nil, e.errorf("shape %v has more rows than an int can count", sh)
	}
	b := e.bytes()
	m := &tensor.Matrix{Rows: int(rows), Cols: sh[2]}
	if err := s.fill(m, e.info.DType, b); err != nil {
		return nil, err
	}
	return m, nil
}
