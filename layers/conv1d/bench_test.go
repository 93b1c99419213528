package conv1d

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkConv runs the 27B GDN conv (C = 10240 channels, K = 4) over T
// tokens. GB/s counts the compulsory traffic: x read and y written once
// (2·T·C·4 bytes); the taps and state are negligible.
func BenchmarkConv(b *testing.B) {
	const c, k = 10240, 4
	for _, kern := range []struct {
		name string
		k    Kernel
	}{{"naive", Naive{}}, {"chunked", Chunked{}}} {
		for _, t := range []int{1, 512, 2048, 8192} {
			b.Run(fmt.Sprintf("%s/T=%d", kern.name, t), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(7, uint64(t)))
				x, w, state := randn(rng, t*c), randn(rng, c*k), randn(rng, k*c)
				y := make([]float32, t*c)
				b.SetBytes(int64(2 * t * c * 4))
				for b.Loop() {
					if err := kern.k.Forward(y, x, w, Dims{T: t, C: c, K: k}, state); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
			})
		}
	}
}
