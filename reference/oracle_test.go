package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	gt "gorgonia.org/tensor"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// gorgonia.org/tensor is an independent implementation of the dense ops
// (frozen since 2022, float64 here): it is an oracle for the tests only,
// never on a hot path (docs/architecture.md says why).

func dense(rows, cols int, x []float32) *gt.Dense {
	return gt.New(gt.WithShape(rows, cols), gt.WithBacking(Widen(x)))
}

func TestMatMulAgainstGorgonia(t *testing.T) {
	r := Rand(11, 1)
	for _, c := range []struct{ m, k, n int }{{1, 37, 19}, {7, 64, 33}, {33, 130, 70}} {
		x := Normals(r, c.m*c.k, 1)
		w := Normals(r, c.n*c.k, 1)
		wt := make([]float32, len(w)) // [K, N] for the oracle's x·wt
		for i := 0; i < c.n; i++ {
			for j := 0; j < c.k; j++ {
				wt[j*c.n+i] = w[i*c.k+j]
			}
		}
		want, err := gt.MatMul(dense(c.m, c.k, x), dense(c.k, c.n, wt))
		require.NoError(t, err)
		for _, bf16 := range []bool{false, true} {
			var mat *tensor.Matrix
			if bf16 {
				b := make([]uint16, len(w))
				for i, v := range w {
					b[i] = tensor.Float32ToBF16(v)
				}
				mat, err = tensor.NewMatrixBF16(c.n, c.k, b)
				require.NoError(t, err)
				// The oracle sees the same rounded weights.
				for i := 0; i < c.n; i++ {
					for j := 0; j < c.k; j++ {
						wt[j*c.n+i] = tensor.BF16ToFloat32(b[i*c.k+j])
					}
				}
				want, err = gt.MatMul(dense(c.m, c.k, x), dense(c.k, c.n, wt))
				require.NoError(t, err)
			} else {
				mat, err = tensor.NewMatrixF32(c.n, c.k, w)
				require.NoError(t, err)
			}
			for name, mm := range map[string]linalg.MatMuler{"naive": linalg.Naive{}, "blocked": linalg.Blocked{}} {
				y := make([]float32, c.m*c.n)
				require.NoError(t, mm.MatMulT(y, x, c.m, mat))
				assert.Less(t, RelL2(y, want.Data().([]float64)), 1e-6, "%s bf16=%v %+v", name, bf16, c)
			}
		}
	}
}

func TestSoftmaxAgainstGorgonia(t *testing.T) {
	logits := Normals(Rand(12, 1), 300, 4)
	want, err := gt.SoftMax(dense(1, len(logits), logits), 1)
	require.NoError(t, err)
	got := generate.Softmax(logits, 1)
	w := want.Data().([]float64)
	for i := range got {
		require.InDelta(t, w[i], got[i], 1e-12, "p[%d]", i)
	}
}

// RMSNorm₁₊ built from the oracle's primitives: x · (Σx²/H + ε)^−½ · (1 + w).
func TestRMSNormAgainstGorgonia(t *testing.T) {
	const rows, h, eps = 5, 96, 1e-6
	r := Rand(13, 1)
	x, w := Normals(r, rows*h, 2), Normals(r, h, 0.3)
	got := make([]float32, rows*h)
	require.NoError(t, norm.RMSNormOnePlus(got, x, w, eps))
	xt := dense(rows, h, x)
	sq, err := gt.Square(xt)
	require.NoError(t, err)
	ss, err := gt.Sum(sq, 1)
	require.NoError(t, err)
	sums := ss.Data().([]float64)
	xd := xt.Data().([]float64)
	want := make([]float64, rows*h)
	for i := 0; i < rows; i++ {
		inv := 1 / math.Sqrt(sums[i]/h+eps)
		for j := 0; j < h; j++ {
			want[i*h+j] = xd[i*h+j] * inv * (1 + float64(w[j]))
		}
	}
	assert.Less(t, RelL2(got, want), 1e-6)
}
