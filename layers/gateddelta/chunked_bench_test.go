package gateddelta

import (
	"fmt"
	"sync"
	"testing"
)

// dims27B are one GDN layer's core shapes in Qwen3.5/3.6-27B.
var dims27B = Dims{NK: 16, NV: 48, DK: 128, DV: 128}

// benchInputs holds one set of 27B-shaped inputs long enough for every
// benchmark; shorter runs use its leading tokens.
var benchInputs = sync.OnceValue(func() *inputs {
	d := dims27B
	d.T = 8192
	return newInputs(42, d, true)
})

// prefix returns the first T tokens of in as a new problem view (the
// slices are shared, not copied).
func (in *inputs) prefix(T int) *inputs {
	d := in.d
	d.T = T
	qk, vv := T*d.NK*d.DK, T*d.NV*d.DV
	return &inputs{d: d, q: in.q[:qk], k: in.k[:qk], v: in.v[:vv], g: in.g[:T*d.NV], beta: in.beta[:T*d.NV], state: in.state}
}

// Anchor FLOP counts (shared/anchors.md), per head-token.
func recurrentFLOP(d Dims) float64 { return 7 * float64(d.DK*d.DV) }
func chunkedFLOP(d Dims) float64 {
	const C = 64
	return C*float64(5*d.DK+3*d.DV) + 6*float64(d.DK*d.DV)
}

// BenchmarkCore times the core at the 27B layer shapes and reports
// GFLOP/s by the anchors' counts: the recurrent count for naive and recurrent,
// the chunked count (C = 64) for chunked, so chunked's figure is directly
// comparable with the anchors' table.
func BenchmarkCore(b *testing.B) {
	for _, kc := range []struct {
		name string
		kern Kernel
		flop func(Dims) float64
	}{
		{"naive", Naive{}, recurrentFLOP},
		{"chunked", Chunked{}, chunkedFLOP},
		{"recurrent", Recurrent{}, recurrentFLOP},
	} {
		for _, T := range []int{512, 2048, 8192} {
			b.Run(fmt.Sprintf("%s/T=%d", kc.name, T), func(b *testing.B) {
				if kc.name == "naive" && T > 2048 && testing.Short() {
					b.Skip("naive at T=8192 takes ~10 s per op")
				}
				in := benchInputs().prefix(T)
				out := make([]float32, T*in.d.NV*in.d.DV)
				// The state carries over from op to op, as in a session; the
				// kernels' cost does not depend on its values.
				state := append([]float32(nil), in.state...)
				cpu0 := processCPU()
				for b.Loop() {
					if err := kc.kern.Forward(out, in.q, in.k, in.v, in.g, in.beta, in.d, state); err != nil {
						b.Fatal(err)
					}
				}
				reportTimes(b, cpu0, kc.flop(in.d)*float64(T*in.d.NV))
			})
		}
	}
}

// BenchmarkDecodeStep times one decode token (T = 1, carried state) of a
// 27B GDN layer's core. "hot" reuses one layer's 3 MiB state, which then
// sits in cache; "cold48" cycles through 48 layers' states (144 MiB, as in
// real decoding) so each step reads its state from memory.
func BenchmarkDecodeStep(b *testing.B) {
	d := dims27B
	d.T = 1
	in := newInputs(42, d, true)
	for _, nLayers := range []int{1, 48} {
		name := "hot"
		if nLayers > 1 {
			name = fmt.Sprintf("cold%d", nLayers)
		}
		b.Run(name, func(b *testing.B) {
			states := make([][]float32, nLayers)
			for i := range states {
				states[i] = append([]float32(nil), in.state...)
			}
			out := make([]float32, in.d.NV*in.d.DV)
			i := 0
			cpu0 := processCPU()
			for b.Loop() {
				if err := (Chunked{}).Forward(out, in.q, in.k, in.v, in.g, in.beta, in.d, states[i%nLayers]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportTimes(b, cpu0, recurrentFLOP(in.d)*float64(in.d.NV))
		})
	}
}

// reportTimes reports wall ms/op, GFLOP/s by wall time for flop FLOPs per
// op, and CPU ms/op (all threads, since cpu0) where the platform has it.
func reportTimes(b *testing.B, cpu0, flop float64) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e3, "ms/op")
	b.ReportMetric(flop/sec/1e9, "GFLOP/s")
	if cpu0 >= 0 {
		b.ReportMetric((processCPU()-cpu0)/float64(b.N)*1e3, "cpu-ms/op")
	}
}
