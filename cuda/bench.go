package cuda

import (
	"fmt"
	"math"
)

// BenchKind names a device-resident benchmark of the library (qr_bench).
type BenchKind int

// The benchmarks. Shapes are the 27B's (hidden 5120; GDN 16 key and 48 value
// heads of 128, conv 4; attention 24/4 heads of 256); inputs are random
// values generated on the GPU from fixed seeds, never zeros.
const (
	BenchCopy     BenchKind = iota // device-to-device copy of t MiB; Extra[0] = GB/s (read + write)
	BenchGEMM                      // cuBLAS bf16 t×t×t; Extra[0] = TFLOP/s
	BenchConv                      // conv+SiLU over 10240 channels, bf16; variant 100·U+TT = launch shape (0 default); Extra[0] = GB/s
	BenchGDNCore                   // chunked core; variant = the tensor-core scan's shape (432, 832, 864; 1 = the default), 0 = fp32 SIMT; Extra = TFLOP/s, prep ms, scan ms
	BenchGDNLayer                  // whole layer prefill; Extra = stage medians (ms) then projection TFLOP/s
	BenchDecode                    // one decode step of one layer; variant 1 = CUDA graph replay; Extra[0] = GB/s of weights
	BenchAttn                      // fp32 attention core (the verification kernel); Extra[0] = TFLOP/s
	BenchFlash                     // bf16 flash attention (prefill, causal); variant = one of FlashShapes (0 default); Extra[0] = TFLOP/s
)

// LayerStages names the Extra entries of BenchGDNLayer, in order.
var LayerStages = []string{"in_proj", "conv", "prep", "core", "norm", "out_proj", "proj TFLOP/s"}

// Timing is one benchmark's result: milliseconds per run over the timed
// repetitions (CUDA events around each, after warm-ups), plus extras.
type Timing struct {
	Median, Min, Max float64
	Extra            []float64
}

// Bench runs one library benchmark: t is the token count (MiB for
// BenchCopy, the matrix side for BenchGEMM), variant as per the kind, reps
// the timed repetitions.
func (d *Device) Bench(kind BenchKind, t, variant, reps int) (Timing, error) {
	if reps <= 0 {
		return Timing{}, fmt.Errorf("cuda: bench: reps %d", reps)
	}
	out := make([]float64, 16)
	err := d.call(fmt.Sprintf("bench %d", kind), func() int { return cBench(int(kind), t, variant, reps, out) })
	if err != nil {
		return Timing{}, err
	}
	tm := Timing{Median: out[0], Min: out[1], Max: out[2]}
	for _, v := range out[3:] {
		if math.IsNaN(v) { // the library fills unused extras with NaN
			break
		}
		tm.Extra = append(tm.Extra, v)
	}
	return tm, nil
}

// BenchConv times the fused causal conv + SiLU at t tokens (bf16 in and out).
func (d *Device) BenchConv(t int) (Timing, error) { return d.Bench(BenchConv, t, 0, 50) }

// BenchGDNCore times the chunked gated delta rule (prep + scan) at t tokens
// with the tensor-core scan's launch shape bv (432, 832 or 864: warps · 100
// + value block; 1 the default), or the fp32 SIMT variant for bv = 0.
func (d *Device) BenchGDNCore(t, bv int) (Timing, error) { return d.Bench(BenchGDNCore, t, bv, 20) }

// BenchGDNLayer times one whole GDN layer prefill at t tokens (projections
// through cuBLAS, conv, gates, core with value block bv, gated norm,
// out_proj) from zero state, with per-stage medians in Extra.
func (d *Device) BenchGDNLayer(t, bv int) (Timing, error) { return d.Bench(BenchGDNLayer, t, bv, 10) }

// BenchDecodeStep times one decode step of one GDN layer (GEMV projections,
// conv update, gates, recurrent update, norm, out GEMV), as plain launches
// or, with graph, as a captured CUDA graph replay.
func (d *Device) BenchDecodeStep(graph bool) (Timing, error) {
	v := 0
	if graph {
		v = 1
	}
	return d.Bench(BenchDecode, 1, v, 200)
}
