package gateddelta

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkExpAffine times expAffine at every level this CPU runs on what
// the chunk step feeds it: e^{γ_r − γ_s} over one row of C = 64 cumulative
// log-decays (all exponents ≤ 0), and over a long row for the steady-state
// rate. It reports ns per element by CPU time as well as by wall time.
func BenchmarkExpAffine(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{64, 4096} {
		gam := make([]float64, n)
		acc := 0.0
		for i := range gam {
			acc -= 0.05 * r.Float64()
			gam[i] = acc
		}
		dst := make([]float32, n)
		for _, ks := range levelsHere() {
			b.Run(fmt.Sprintf("%s/n=%d", ks.level, n), func(b *testing.B) {
				cpu0 := ProcessCPU()
				for b.Loop() {
					ks.expAffine(dst, gam, gam[n-1], -1)
				}
				elems := float64(n) * float64(b.N)
				b.ReportMetric(b.Elapsed().Seconds()/elems*1e9, "ns/elem")
				if cpu0 >= 0 {
					b.ReportMetric((ProcessCPU()-cpu0)/elems*1e9, "cpu-ns/elem")
				}
			})
		}
	}
}
