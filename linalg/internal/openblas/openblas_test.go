//go:build openblas && cgo

package openblas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

func TestAgreesWithBlocked(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	m, k, n := 70, 1000, 90
	x := randVec(r, m*k)
	w := &tensor.Matrix{Rows: n, Cols: k, F32: randVec(r, n*k)}
	want, got := make([]float32, m*n), make([]float32, m*n)
	require.NoError(t, SgemmNT{}.MatMulT(want, x, m, w))
	require.NoError(t, linalg.Blocked{}.MatMulT(got, x, m, w))
	// Two float32 summation orders: see linalg's sumTol (u·√K).
	assert.LessOrEqual(t, tensor.RelL2(got, want), math.Sqrt(float64(k))/(1<<24))
}

// BenchmarkSgemm runs the shapes of linalg's BenchmarkMatMul (M×K×N).
func BenchmarkSgemm(b *testing.B) {
	r := rand.New(rand.NewPCG(33, 33))
	for _, s := range [][3]int{{2048, 5120, 10240}, {512, 5120, 5120}, {1, 5120, 17408}, {64, 5120, 17408}} {
		m, k, n := s[0], s[1], s[2]
		x := randVec(r, m*k)
		w := &tensor.Matrix{Rows: n, Cols: k, F32: randVec(r, n*k)}
		y := make([]float32, m*n)
		b.Run(fmt.Sprintf("f32/%dx%dx%d", m, k, n), func(b *testing.B) {
			for b.Loop() {
				if err := (SgemmNT{}).MatMulT(y, x, m, w); err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(2*float64(m*n*k)/sec/1e9, "GFLOP/s")
			b.ReportMetric(float64(w.Bytes())/sec/1e9, "GB/s")
		})
	}
}
