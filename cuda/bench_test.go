//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestBenchTable runs the device-resident benchmarks when QWENREF_CUDA_BENCH
// is set, logs each line, and writes a markdown table to
// $QWENREF_CUDA_BENCH_OUT (if set). The anchors column holds the H200
// figures of the peers (transformers + flash-linear-attention).
func TestBenchTable(t *testing.T) {
	if os.Getenv("QWENREF_CUDA_BENCH") == "" {
		t.Skip("set QWENREF_CUDA_BENCH=1 to run the GPU benchmarks")
	}
	d := need(t)
	var rows []string
	add := func(what, anchor string, tm Timing, err error, extra string) {
		if err != nil {
			t.Errorf("%s: %v", what, err)
			rows = append(rows, fmt.Sprintf("| %s | error: %v | | %s |", what, err, anchor))
			return
		}
		line := fmt.Sprintf("| %s | %.4g | %.4g–%.4g | %s | %s |", what, tm.Median, tm.Min, tm.Max, anchor, extra)
		t.Log(line)
		rows = append(rows, line)
	}
	tm, err := d.Bench(BenchCopy, 2048, 0, 20)
	add("device copy 2 GiB", "4.25 TB/s", tm, err, fmt.Sprintf("%.0f GB/s", first(tm)))
	tm, err = d.Bench(BenchGEMM, 8192, 0, 10)
	add("cuBLAS bf16 GEMM 8192³", "694 TFLOP/s", tm, err, fmt.Sprintf("%.0f TFLOP/s", first(tm)))
	for _, T := range []int{8192, 32768} {
		anchor := map[int]string{8192: "fla 0.23, Dao 0.155", 32768: "fla 0.59, Dao 0.469"}[T]
		tm, err = d.BenchConv(T)
		add(fmt.Sprintf("conv+SiLU T=%d", T), anchor, tm, err, fmt.Sprintf("%.0f GB/s", first(tm)))
	}
	coreAnchor := map[int]string{512: "fla 0.64", 2048: "fla 0.65", 8192: "fla 1.14", 32768: "fla 3.73"}
	for _, T := range []int{512, 2048, 8192, 32768} {
		for _, bv := range []int{32, 64} {
			tm, err = d.BenchGDNCore(T, bv)
			add(fmt.Sprintf("GDN core bf16 bv=%d T=%d", bv, T), coreAnchor[T], tm, err,
				fmt.Sprintf("%.1f TFLOP/s", first(tm)))
		}
	}
	tm, err = d.BenchGDNCore(2048, 0)
	add("GDN core fp32 SIMT T=2048", "torch fallback 4.38", tm, err, fmt.Sprintf("%.2f TFLOP/s", first(tm)))
	layerAnchor := map[int]string{512: "fla 1.46", 2048: "fla 1.80", 8192: "fla 5.16 (floor 2.84)", 32768: "fla 19.9"}
	for _, T := range []int{512, 2048, 8192, 32768} {
		for _, bv := range []int{32, 64} {
			tm, err = d.BenchGDNLayer(T, bv)
			var st []string
			for i, v := range tm.Extra {
				st = append(st, fmt.Sprintf("%s %.3g", LayerStages[i], v))
			}
			add(fmt.Sprintf("GDN layer prefill bv=%d T=%d", bv, T), layerAnchor[T], tm, err, strings.Join(st, ", "))
		}
	}
	for _, g := range []bool{false, true} {
		tm, err = d.BenchDecodeStep(g)
		add(fmt.Sprintf("GDN layer decode step (graph=%v)", g), "fla 0.081", tm, err,
			fmt.Sprintf("%.0f GB/s of weights", first(tm)))
	}
	tm, err = d.Bench(BenchAttn, 2048, 0, 3)
	add("attention fp32 (verification kernel) T=2048", "", tm, err, fmt.Sprintf("%.2f TFLOP/s", first(tm)))

	table := "| what | median ms | min–max ms | anchor (ms) | notes |\n| --- | --- | --- | --- | --- |\n" +
		strings.Join(rows, "\n") + "\n"
	if p := os.Getenv("QWENREF_CUDA_BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, []byte("GPU: "+d.Name()+"\n\n"+table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func first(tm Timing) float64 {
	if len(tm.Extra) == 0 {
		return 0
	}
	return tm.Extra[0]
}
