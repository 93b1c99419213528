package attention

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttention runs the softmax core at the 27B shapes (24 query
// heads, 4 KV heads, head dim 256): prefill with S = T, and one decode
// step (T = 1) against a 2048-token cache. GFLOP/s counts 4·D FLOPs (the
// q·k dot and the p·v axpy) per visible (query, key) pair and head.
func BenchmarkAttention(b *testing.B) {
	const nh, nkv, dim = 24, 4, 256
	shapes := []Dims{
		{T: 512, S: 512, NH: nh, NKV: nkv, D: dim},
		{T: 2048, S: 2048, NH: nh, NKV: nkv, D: dim},
		{T: 1, S: 2048, NH: nh, NKV: nkv, D: dim},
	}
	for _, kern := range []struct {
		name string
		k    Kernel
	}{{"naive", Naive{}}, {"chunked", Chunked{}}} {
		for _, d := range shapes {
			name := fmt.Sprintf("%s/T=%d", kern.name, d.T)
			if d.T == 1 {
				name = fmt.Sprintf("%s/decode/S=%d", kern.name, d.S)
			}
			b.Run(name, func(b *testing.B) {
				rng := rand.New(rand.NewPCG(9, uint64(d.T)))
				p := newAttnProblem(rng, d)
				out := make([]float32, d.T*d.NH*d.D)
				pairs := 0
				for t := range d.T {
					pairs += d.S - d.T + t + 1
				}
				for b.Loop() {
					if err := kern.k.Forward(out, p.q, p.k, p.v, d, p.scale); err != nil {
						b.Fatal(err)
					}
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(4*float64(d.NH*d.D*pairs)/sec/1e9, "GFLOP/s")
				b.ReportMetric(sec*1e3, "ms/op")
			})
		}
	}
}
