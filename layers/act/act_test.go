package act

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/qwenref/qwenref/internal/parallel/paralleltest"
)

// sliceTol is vecmath's bound for SiLU and sigmoid (6e-7 relative) plus the
// product's half ulp.
const sliceTol = 7e-7

// TestSliceFormsMatchScalar checks the fast slice forms against the
// scalar (float64-evaluated) definitions over |x| ≤ 30, with lengths that
// leave vector tails, in place as the layers call them.
func TestSliceFormsMatchScalar(t *testing.T) {
	for _, n := range []int{1, 7, 8, 17, 1000} {
		x := make([]float32, n)
		g := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*1.7)) * 30
			g[i] = float32(math.Cos(float64(i)*0.3)) * 3
		}
		got := append([]float32(nil), x...)
		SiLUMul(got, got, g)
		for i := range x {
			want := float64(SiLU(x[i])) * float64(g[i])
			assert.InDelta(t, want, got[i], sliceTol*math.Abs(want)+1e-30, "SiLUMul x=%g", x[i])
		}
		got = append(got[:0], g...)
		MulSigmoid(got, got, x)
		for i := range x {
			want := float64(g[i]) * float64(Sigmoid(x[i]))
			assert.InDelta(t, want, got[i], sliceTol*math.Abs(want)+1e-30, "MulSigmoid x=%g", x[i])
		}
	}
}

// Long slices are split over the cores in pieces of a multiple of the
// vector width: the values are the same, bit for bit, on any thread count.
func TestSliceFormsIndependentOfThreads(t *testing.T) {
	n := 100003 // several pieces and a ragged tail
	g, u := make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = float32(math.Sin(float64(i)*0.013)) * 9
		u[i] = float32(math.Cos(float64(i) * 0.007))
	}
	run := func() [][]float32 {
		a, b := make([]float32, n), make([]float32, n)
		SiLUMul(a, g, u)
		MulSigmoid(b, u, g)
		return [][]float32{a, b}
	}
	one, four := paralleltest.OneAndFour(run)
	assert.Equal(t, one, four)
}
