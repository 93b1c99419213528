package gateddelta

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemm times the chunk step's largest product shape (C = 64 rows,
// d_v = 128 columns, d_k = 128 steps) at every level this CPU runs, on hot
// data, and reports GFLOP/s.
func BenchmarkGemm(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const m, n, k = 64, 128, 128
	a, bm, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
	for _, ks := range levelsHere() {
		b.Run(fmt.Sprintf("%s/%dx%dx%d", ks.level, m, n, k), func(b *testing.B) {
			cpu0 := ProcessCPU()
			for b.Loop() {
				ks.gemm(m, n, k, 1, a, k, 1, bm, n, 1, c, n, triNone, nil)
			}
			flop := 2 * m * n * k * float64(b.N)
			b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			if cpu0 >= 0 {
				// By CPU time: what one core does, whatever the machine's load.
				b.ReportMetric(flop/(ProcessCPU()-cpu0)/1e9, "GFLOP/cpu-s")
			}
		})
	}
}
