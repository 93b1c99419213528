package tensor

import "fmt"

// Matrix is a row-major [Rows, Cols] weight in nn.Linear layout ([out, in]).
// Exactly one of F32 and BF16 holds the data: checkpoints in bf16 stay bf16
// in memory (often straight from the mmap) and kernels widen them per tile.
type Matrix struct {
	Rows, Cols int       // [out, in]
	F32        []float32 // float32 storage, or nil
	BF16       []uint16  // bf16 bit patterns, or nil
}

// NewMatrixF32 wraps float32 data, checking its length.
func NewMatrixF32(rows, cols int, data []float32) (*Matrix, error) {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		return nil, fmt.Errorf("tensor: matrix [%d,%d] needs %d float32 values, got %d", rows, cols, rows*cols, len(data))
	}
	return &Matrix{Rows: rows, Cols: cols, F32: data}, nil
}

// NewMatrixBF16 wraps bf16 bit patterns, checking their length.
func NewMatrixBF16(rows, cols int, data []uint16) (*Matrix, error) {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		return nil, fmt.Errorf("tensor: matrix [%d,%d] needs %d bf16 values, got %d", rows, cols, rows*cols, len(data))
	}
	return &Matrix{Rows: rows, Cols: cols, BF16: data}, nil
}

// IsBF16 reports whether the matrix is stored as bf16.
func (m *Matrix) IsBF16() bool { return m.BF16 != nil }

// Row widens row i into dst (len ≥ Cols) and returns dst[:Cols].
func (m *Matrix) Row(i int, dst []float32) []float32 {
	dst = dst[:m.Cols]
	if m.BF16 != nil {
		for j, b := range m.BF16[i*m.Cols : (i+1)*m.Cols] {
			dst[j] = BF16ToFloat32(b)
		}
		return dst
	}
	copy(dst, m.F32[i*m.Cols:(i+1)*m.Cols])
	return dst
}

// At returns element (i, j) as float32.
func (m *Matrix) At(i, j int) float32 {
	if m.BF16 != nil {
		return BF16ToFloat32(m.BF16[i*m.Cols+j])
	}
	return m.F32[i*m.Cols+j]
}

// ToFloat32 returns the whole matrix widened to a new float32 slice.
func (m *Matrix) ToFloat32() []float32 {
	out := make([]float32, m.Rows*m.Cols)
	for i := 0; i < m.Rows; i++ {
		m.Row(i, out[i*m.Cols:])
	}
	return out
}

// Bytes is the storage size in bytes.
func (m *Matrix) Bytes() int64 {
	if m.BF16 != nil {
		return int64(len(m.BF16)) * 2
	}
	return int64(len(m.F32)) * 4
}
