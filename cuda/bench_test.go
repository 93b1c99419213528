package cuda

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestBenchTable runs the device-resident benchmarks when QWENREF_CUDA_BENCH
// is set ("1" for all, else only rows whose label contains it), logs each
// line, and writes a markdown table to $QWENREF_CUDA_BENCH_OUT (if set). The
// anchors column holds the H200 figures of the peers (transformers +
// flash-linear-attention).
func TestBenchTable(t *testing.T) {
	filter := os.Getenv("QWENREF_CUDA_BENCH")
	if filter == "" {
		t.Skip("set QWENREF_CUDA_BENCH=1 to run the GPU benchmarks")
	}
	d := need(t)
	var rows []string
	want := func(what string) bool { return filter == "1" || strings.Contains(what, filter) }
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
	if w := "device copy 2 GiB"; want(w) {
		tm, err := d.Bench(BenchCopy, 2048, 0, 20)
		add(w, "4.25 TB/s", tm, err, fmt.Sprintf("%.0f GB/s", first(tm)))
	}
	if w := "cuBLAS bf16 GEMM 8192³"; want(w) {
		tm, err := d.Bench(BenchGEMM, 8192, 0, 10)
		add(w, "694 TFLOP/s", tm, err, fmt.Sprintf("%.0f TFLOP/s", first(tm)))
	}
	for _, T := range []int{512, 2048, 8192, 32768} {
		anchor := map[int]string{8192: "fla 0.23, Dao 0.155", 32768: "fla 0.59, Dao 0.469"}[T]
		if w := fmt.Sprintf("conv+SiLU T=%d", T); want(w) {
			tm, err := d.BenchConv(T)
			add(w, anchor, tm, err, fmt.Sprintf("%.0f GB/s", first(tm)))
		}
		// Launch shapes (convShapes).
		for _, v := range convShapes[1:] {
			if w := fmt.Sprintf("conv+SiLU T=%d shape %d", T, v); want(w) {
				tm, err := d.Bench(BenchConv, T, v, 50)
				add(w, anchor, tm, err, fmt.Sprintf("%.0f GB/s", first(tm)))
			}
		}
	}
	// The prefill flash attention at the 27B's attention widths, each shape.
	for _, T := range []int{2048, 8192} {
		for _, v := range append([]int{0}, FlashShapes...) {
			if w := fmt.Sprintf("flash attention bf16 T=%d shape %d", T, v); want(w) {
				tm, err := d.Bench(BenchFlash, T, v, 10)
				add(w, "FA3 hd256 (Hopper)", tm, err, fmt.Sprintf("%.0f TFLOP/s", first(tm)))
			}
		}
	}
	coreAnchor := map[int]string{512: "fla 0.64", 2048: "fla 0.65", 8192: "fla 1.14", 32768: "fla 3.73"}
	for _, T := range []int{512, 2048, 8192, 32768} {
		for _, bv := range append(slices.Clone(gdnScanShapes), int(ScanWG)) {
			if w := fmt.Sprintf("GDN core bf16 shape %d T=%d", bv, T); want(w) {
				tm, err := d.BenchGDNCore(T, bv)
				x := fmt.Sprintf("%.1f TFLOP/s", first(tm))
				if len(tm.Extra) >= 3 {
					x += fmt.Sprintf(", prep %.3g, scan %.3g", tm.Extra[1], tm.Extra[2])
				}
				add(w, coreAnchor[T], tm, err, x)
			}
		}
	}
	if w := "GDN core fp32 SIMT T=2048"; want(w) {
		tm, err := d.BenchGDNCore(2048, 0)
		add(w, "torch fallback 4.38", tm, err, fmt.Sprintf("%.2f TFLOP/s", first(tm)))
	}
	layerAnchor := map[int]string{512: "fla 1.46", 2048: "fla 1.80", 8192: "fla 5.16 (floor 2.84)", 32768: "fla 19.9"}
	for _, T := range []int{512, 2048, 8192, 32768} {
		for _, bv := range append(slices.Clone(gdnScanShapes), int(ScanWG)) {
			if w := fmt.Sprintf("GDN layer prefill shape %d T=%d", bv, T); want(w) {
				tm, err := d.BenchGDNLayer(T, bv)
				var st []string
				for i, v := range tm.Extra {
					if i < len(LayerStages) {
						st = append(st, fmt.Sprintf("%s %.3g", LayerStages[i], v))
					}
				}
				add(w, layerAnchor[T], tm, err, strings.Join(st, ", "))
			}
		}
	}
	for _, g := range []bool{false, true} {
		if w := fmt.Sprintf("GDN layer decode step (graph=%v)", g); want(w) {
			tm, err := d.BenchDecodeStep(g)
			add(w, "fla 0.081", tm, err, fmt.Sprintf("%.0f GB/s of weights", first(tm)))
		}
	}
	if w := "attention fp32 (verification kernel) T=2048"; want(w) {
		tm, err := d.Bench(BenchAttn, 2048, 0, 3)
		add(w, "", tm, err, fmt.Sprintf("%.2f TFLOP/s", first(tm)))
	}

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
