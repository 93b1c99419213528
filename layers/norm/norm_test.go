package norm

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/parallel/paralleltest"
	"github.com/qwenref/qwenref/layers/act"
)

// normTol bounds each value's relative error against the float64 norms:
// the float64 sum of squares is exact to 2^-50, and the float32 scale and
// products add a few half-ulps (2^-24 each); the gated form adds vecmath's
// SiLU error (≤ 6e-7). A wrong row, weight or eps errs by far more.
const (
	normTol  = 4e-7
	gatedTol = 1.2e-6
)

func rows(n int, seed float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*seed+seed)) * float32(1+i%5)
	}
	return x
}

func near(t *testing.T, what string, want float64, got float32, tol float64) {
	t.Helper()
	assert.InDelta(t, want, float64(got), tol*math.Abs(want)+1e-30, "%s", what)
}

// TestNormsMatchFloat64 checks the three norms against float64 forms of
// their formulas on row lengths that leave vector tails (13, 300) and fill
// whole registers (128, 5120), in place and not.
func TestNormsMatchFloat64(t *testing.T) {
	const eps = 1e-6
	for _, dim := range []int{1, 13, 128, 300, 5120} {
		n := 3 * dim
		x, w, z := rows(n, 0.37), rows(dim, 0.11), rows(n, 0.73)
		for i := range w {
			w[i] *= 0.1
		}
		y := make([]float32, n)
		require.NoError(t, RMSNormOnePlus(y, x, w, eps))
		yl := make([]float32, n)
		require.NoError(t, L2Normalize(yl, x, dim, eps))
		yg := make([]float32, n)
		require.NoError(t, GatedRMSNormSiLU(yg, x, z, w, eps))
		ys := make([]float32, n)
		require.NoError(t, GatedRMSNorm(ys, x, z, w, eps, act.SiLU))
		for r := 0; r < n; r += dim {
			var ss float64
			for _, v := range x[r : r+dim] {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(dim)+eps)
			invL2 := 1 / math.Sqrt(ss+eps)
			for i := range dim {
				v := float64(x[r+i])
				zz := float64(z[r+i])
				silu := zz / (1 + math.Exp(-zz))
				near(t, "RMSNormOnePlus", v*inv*(1+float64(w[i])), y[r+i], normTol)
				near(t, "L2Normalize", v*invL2, yl[r+i], normTol)
				near(t, "GatedRMSNormSiLU", float64(w[i])*v*inv*silu, yg[r+i], gatedTol)
				near(t, "GatedRMSNorm", float64(w[i])*v*inv*silu, ys[r+i], normTol)
			}
		}
		// In place gives the same bits.
		a := append([]float32(nil), x...)
		require.NoError(t, RMSNormOnePlus(a, a, w, eps))
		assert.Equal(t, y, a, "RMSNormOnePlus in place, dim %d", dim)
		a = append(a[:0], x...)
		require.NoError(t, L2Normalize(a, a, dim, eps))
		assert.Equal(t, yl, a, "L2Normalize in place, dim %d", dim)
		a = append(a[:0], x...)
		require.NoError(t, GatedRMSNormSiLU(a, a, z, w, eps))
		assert.Equal(t, yg, a, "GatedRMSNormSiLU with y = x, dim %d", dim)
		a = append(a[:0], z...)
		require.NoError(t, GatedRMSNormSiLU(a, x, a, w, eps))
		assert.Equal(t, yg, a, "GatedRMSNormSiLU with y = z, dim %d", dim)
	}
}

func TestNormErrors(t *testing.T) {
	x := make([]float32, 6)
	assert.Error(t, RMSNormOnePlus(x, x, nil, 1e-6))
	assert.Error(t, RMSNormOnePlus(x[:5], x, make([]float32, 3), 1e-6))
	assert.Error(t, GatedRMSNormSiLU(x, x, x[:3], make([]float32, 3), 1e-6))
	assert.Error(t, GatedRMSNorm(x, x, x, make([]float32, 4), 1e-6, act.SiLU))
	assert.Error(t, L2Normalize(x, x, 0, 1e-6))
	assert.Error(t, L2Normalize(x, x, 4, 1e-6))
}

// Long inputs are split over the cores by whole rows: the values are the
// same, bit for bit, on one thread and on several.
func TestNormsIndependentOfThreads(t *testing.T) {
	const rows, dim = 700, 128 // 89,600 values: several pieces of parallel.Rows
	x, z, w := make([]float32, rows*dim), make([]float32, rows*dim), make([]float32, dim)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) * 0.37))
		z[i] = float32(math.Cos(float64(i) * 0.11))
	}
	for i := range w {
		w[i] = float32(i%7) * 0.1
	}
	run := func() [][]float32 {
		a, b, c := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
		require.NoError(t, RMSNormOnePlus(a, x, w, 1e-6))
		require.NoError(t, GatedRMSNormSiLU(b, x, z, w, 1e-6))
		require.NoError(t, L2Normalize(c, x, dim, 1e-6))
		return [][]float32{a, b, c}
	}
	one, four := paralleltest.OneAndFour(run)
	assert.Equal(t, one, four)
}
