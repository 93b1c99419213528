package linalg

import "github.com/qwenref/qwenref/tensor"

// Naive is the reference product: one float32 dot product per output, in
// the order y[i,n] = Σ_k x[i,k]·W[n,k]. It is slow and obviously right.
type Naive struct{}

// MatMulT implements MatMuler.
func (Naive) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := CheckDims(y, x, m, w); err != nil {
		return err
	}
	k := w.Cols
	row := make([]float32, k)
	for n := 0; n < w.Rows; n++ {
		wn := w.Row(n, row)
		for i := 0; i < m; i++ {
			xi := x[i*k : (i+1)*k]
			var s float32
			for j, v := range xi {
				s += v * wn[j]
			}
			y[i*w.Rows+n] = s
		}
	}
	return nil
}
