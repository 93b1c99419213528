package gateddelta_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/reference"
)

// dims27B are one GDN layer's core shapes in Qwen3.5/3.6-27B.
var dims27B = gateddelta.Dims{NK: 16, NV: 48, DK: 128, DV: 128}

// benchInputs holds one set of 27B-shaped inputs long enough for every
// benchmark; shorter runs use its leading tokens.
var benchInputs = sync.OnceValue(func() *reference.GDNInputs {
	d := dims27B
	d.T = 8192
	in, err := reference.NewGDNInputs(42, d, reference.GDNOptions{WithState: true})
	if err != nil {
		panic(err)
	}
	return in
})

// prefix returns the first T tokens of in as a new problem view (the
// slices are shared, not copied).
func prefix(in *reference.GDNInputs, T int) *reference.GDNInputs {
	d := in.Dims
	d.T = T
	qk, vv := T*d.NK*d.DK, T*d.NV*d.DV
	return &reference.GDNInputs{Dims: d, Q: in.Q[:qk], K: in.K[:qk], V: in.V[:vv], G: in.G[:T*d.NV], Beta: in.Beta[:T*d.NV], State: in.State}
}

// The FLOP counts per head-token that the peers' figures use (see
// docs/learn/03-chunked-form.md): 7·d_k·d_v for the recurrent form,
// C·(5d_k + 3d_v) + 6·d_k·d_v at C = 64 for the chunked one.
func recurrentFLOP(d gateddelta.Dims) float64 { return 7 * float64(d.DK*d.DV) }
func chunkedFLOP(d gateddelta.Dims) float64 {
	const C = 64
	return C*float64(5*d.DK+3*d.DV) + 6*float64(d.DK*d.DV)
}

// BenchmarkCore times the core at the 27B layer shapes and reports
// GFLOP/s by the peers' counts: the recurrent count for naive and
// recurrent, the chunked count (C = 64) for chunked. The kernel level is
// the selected one; QWENREF_CPU=avx2 or portable times a lower one.
func BenchmarkCore(b *testing.B) {
	for _, kc := range []struct {
		name string
		kern gateddelta.Kernel
		flop func(gateddelta.Dims) float64
	}{
		{"naive", gateddelta.Naive{}, recurrentFLOP},
		{"chunked", gateddelta.Chunked{}, chunkedFLOP},
		{"recurrent", gateddelta.Recurrent{}, recurrentFLOP},
	} {
		for _, T := range []int{512, 2048, 8192} {
			b.Run(fmt.Sprintf("%s/T=%d", kc.name, T), func(b *testing.B) {
				if kc.name == "naive" && T > 2048 && testing.Short() {
					b.Skip("naive at T=8192 takes ~10 s per op")
				}
				in := prefix(benchInputs(), T)
				d := in.Dims
				out := make([]float32, T*d.NV*d.DV)
				// The state carries over from op to op, as in a session; the
				// kernels' cost does not depend on its values.
				state := append([]float32(nil), in.State...)
				cpu0 := gateddelta.ProcessCPU()
				for b.Loop() {
					if err := kc.kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, d, state); err != nil {
						b.Fatal(err)
					}
				}
				reportTimes(b, cpu0, kc.flop(d)*float64(T*d.NV))
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
	in, err := reference.NewGDNInputs(42, d, reference.GDNOptions{WithState: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, nLayers := range []int{1, 48} {
		name := "hot"
		if nLayers > 1 {
			name = fmt.Sprintf("cold%d", nLayers)
		}
		b.Run(name, func(b *testing.B) {
			states := make([][]float32, nLayers)
			for i := range states {
				states[i] = append([]float32(nil), in.State...)
			}
			out := make([]float32, d.NV*d.DV)
			i := 0
			cpu0 := gateddelta.ProcessCPU()
			for b.Loop() {
				if err := (gateddelta.Chunked{}).Forward(out, in.Q, in.K, in.V, in.G, in.Beta, d, states[i%nLayers]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportTimes(b, cpu0, recurrentFLOP(d)*float64(d.NV))
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
		b.ReportMetric((gateddelta.ProcessCPU()-cpu0)/float64(b.N)*1e3, "cpu-ms/op")
	}
}
