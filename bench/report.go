package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qwenref/qwenref/model"
)

// Ceilings the report measures against, from /work/shared/anchors.md.
const (
	// CPUCeilingGFLOPS is the project CPU's float32 matmul ceiling: OpenBLAS
	// sgemm 2048×5120×5120 reached 174–199 GFLOP/s on its 2 vCPUs. It is a
	// practical ceiling, not the hardware peak: the cores are Zen 5 (cpuinfo
	// family 26) with full-width AVX-512, and a good GEMM can beat it.
	CPUCeilingGFLOPS = 200
	// GPUCeilingGFLOPS is the H200's bf16 matmul rate through torch (8192³).
	GPUCeilingGFLOPS = 694000
	// GPUCopyGBPS is the H200's device-to-device copy rate.
	GPUCopyGBPS = 4250
)

// Meta describes a sweep for the report header and the files.
type Meta struct {
	Shape   string
	Config  *model.Config
	DType   string
	Seed    uint64
	Method  Method
	Naive   float64 // --naive-max-gflop
	Machine string  // e.g. "linux/amd64, AMD EPYC ..., GOMAXPROCS=2"
	// CPUCeiling in GFLOP/s (CPUCeilingGFLOPS unless overridden).
	CPUCeiling float64
	// CPUCopyGBPS is a copy bandwidth measured at start (0: not measured).
	CPUCopyGBPS float64
	// Command reproduces the sweep.
	Command string
	// Date of the run.
	Date time.Time
}

// ceiling returns the GFLOP/s and GB/s ceilings of a backend's device.
func (m Meta) ceiling(backend string) (gflops, gbps float64) {
	if backend == "cuda" {
		return GPUCeilingGFLOPS, GPUCopyGBPS
	}
	c := m.CPUCeiling
	if c <= 0 {
		c = CPUCeilingGFLOPS
	}
	return c, m.CPUCopyGBPS
}

// WriteTable prints the readable report: a header naming the shape, the
// method and the ceilings, then one table per op with a row per (T, backend).
func WriteTable(w io.Writer, meta Meta, results []Result) error {
	var b strings.Builder
	c := meta.Config
	fmt.Fprintf(&b, "qwenref bench: shape %s (H=%d; GDN n_k=%d n_v=%d d_k=%d d_v=%d K=%d; attention n_h=%d n_kv=%d d_h=%d; MLP I=%d; %d layers, vocab %d), %s weights, seed %d\n",
		meta.Shape, c.HiddenSize, c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernel,
		c.NumHeads, c.NumKVHeads, c.HeadDim, c.IntermediateSize, c.NumLayers, c.VocabSize, meta.DType, meta.Seed)
	if meta.Machine != "" {
		fmt.Fprintf(&b, "machine: %s\n", meta.Machine)
	}
	cpu, _ := meta.ceiling("")
	fmt.Fprintf(&b, "ceilings (%%ceil): CPU ≈ %g GFLOP/s fp32 (OpenBLAS sgemm on the project's 2 vCPUs, anchors; not the FMA peak)", cpu)
	if meta.CPUCopyGBPS > 0 {
		fmt.Fprintf(&b, ", CPU copy %.3g GB/s (measured at start)", meta.CPUCopyGBPS)
	}
	fmt.Fprintf(&b, "; cuda: %g TFLOP/s bf16, %g TB/s copy (H200, anchors)\n", GPUCeilingGFLOPS/1000.0, GPUCopyGBPS/1000.0)
	m := meta.Method
	fmt.Fprintf(&b, "method: %d warm-up, then ≥ %d timed runs", m.Warmup, m.Reps)
	if m.MinTime > 0 {
		fmt.Fprintf(&b, " and ≥ %s in all", m.MinTime)
	}
	if m.MaxTime > 0 {
		fmt.Fprintf(&b, ", stopping after %s", m.MaxTime)
	}
	fmt.Fprintf(&b, "; median (min – max); cpu = median process CPU time per run (all threads). penalty = median / fastest median at that op and T. "+
		"Δ vs naive on the same inputs; naive only up to %g GFLOP per call (--naive-max-gflop).\n", meta.Naive)
	if meta.Command != "" {
		fmt.Fprintf(&b, "command: %s\n", meta.Command)
	}

	// The backend column fits the longest name (mixes are long).
	bw := len("backend")
	for _, r := range results {
		bw = max(bw, utf8.RuneCountInString(r.Backend))
	}
	for _, op := range groupOps(results) {
		o, _ := LookupOp(op)
		fmt.Fprintf(&b, "\n== %s: %s\n   FLOP: %s\n", op, o.About, o.FLOPFormula)
		rate := "GFLOP/s"
		if o.Bytes != nil {
			rate = "GB/s"
		}
		fmt.Fprintf(&b, "%7s  %-*s %8s %10s  %-23s %10s %5s %9s %6s %9s %9s %9s  %s\n",
			"T", bw, "backend", "GFLOP", "median", "(min – max)", "cpu", "runs", rate, "%ceil", "penalty", "max|Δ|", "relL2", "note")
		for _, r := range results {
			if r.Op != op {
				continue
			}
			if !r.Ran() {
				fmt.Fprintf(&b, "%7d  %-*s %8.3g %10s  %-23s %10s %5s %9s %6s %9s %9s %9s  %s\n",
					r.Seq, bw, r.Backend, r.GFLOP, "–", "", "", "", "", "", "", "", "", r.Skipped)
				continue
			}
			gf, gb := meta.ceiling(r.Backend)
			val, ceil := r.GFLOPS, gf
			if o.Bytes != nil {
				val, ceil = r.GBPS, gb
			}
			pct := "–"
			if ceil > 0 && !math.IsNaN(val) {
				pct = fmt.Sprintf("%.0f%%", 100*val/ceil)
			}
			cpu := "–"
			if r.CPU >= 0 {
				cpu = fmtDur(r.CPU)
			}
			fmt.Fprintf(&b, "%7d  %-*s %8.3g %10s  %-23s %10s %5d %9s %6s %9s %9s %9s  %s\n",
				r.Seq, bw, r.Backend, r.GFLOP, fmtDur(r.Median), "("+fmtDur(r.Min)+" – "+fmtDur(r.Max)+")", cpu, r.Runs,
				fmtNum(val, "%.3g"), pct, fmtPenalty(r.Penalty), fmtNum(r.MaxAbsVsNaive, "%.2g"), fmtNum(r.RelL2VsNaive, "%.2g"), r.Note)
		}
	}
	// Rows without a note end in blanks; trim them.
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}

// fmtPenalty prints 1.00× for the fastest and three digits otherwise.
func fmtPenalty(p float64) string {
	switch {
	case math.IsNaN(p):
		return "–"
	case p < 10:
		return fmt.Sprintf("%.2f×", p)
	default:
		return fmt.Sprintf("%.3g×", p)
	}
}

// groupOps lists the ops of results in order of first appearance.
func groupOps(results []Result) []string {
	var out []string
	for _, r := range results {
		if len(out) == 0 || out[len(out)-1] != r.Op {
			seen := false
			for _, o := range out {
				seen = seen || o == r.Op
			}
			if !seen {
				out = append(out, r.Op)
			}
		}
	}
	return out
}

func fmtNum(v float64, f string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf(f, v)
}

// Row is the JSON form of a Result: absent numbers are null.
type Row struct {
	Op            string   `json:"op"`
	Backend       string   `json:"backend"`
	Seq           int      `json:"seq"`
	MedianMS      *float64 `json:"median_ms"`
	MinMS         *float64 `json:"min_ms"`
	MaxMS         *float64 `json:"max_ms"`
	CPUMS         *float64 `json:"cpu_ms"`
	GFLOPS        *float64 `json:"gflops"`
	RelL2VsNaive  *float64 `json:"rel_l2_vs_naive"`
	MaxAbsVsNaive *float64 `json:"max_abs_vs_naive"`
	GBPS          *float64 `json:"gbps,omitempty"`
	Penalty       *float64 `json:"penalty"`
	GFLOP         float64  `json:"gflop"`
	Runs          int      `json:"runs"`
	Cold          bool     `json:"cold,omitempty"`
	Shape         string   `json:"shape"`
	DType         string   `json:"dtype"`
	Skipped       string   `json:"skipped,omitempty"`
	Note          string   `json:"note,omitempty"`
}

func num(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func ms(d time.Duration, ran bool) *float64 {
	if !ran {
		return nil
	}
	return num(float64(d) / 1e6)
}

// Rows converts results to their JSON form.
func Rows(meta Meta, results []Result) []Row {
	rows := make([]Row, 0, len(results))
	for _, r := range results {
		ran := r.Ran()
		rows = append(rows, Row{Op: r.Op, Backend: r.Backend, Seq: r.Seq,
			MedianMS: ms(r.Median, ran), MinMS: ms(r.Min, ran), MaxMS: ms(r.Max, ran), CPUMS: ms(r.CPU, ran && r.CPU >= 0),
			GFLOPS: num(r.GFLOPS), RelL2VsNaive: num(r.RelL2VsNaive), MaxAbsVsNaive: num(r.MaxAbsVsNaive),
			GBPS: num(r.GBPS), Penalty: num(r.Penalty), GFLOP: r.GFLOP, Runs: r.Runs, Cold: r.Cold,
			Shape: meta.Shape, DType: meta.DType, Skipped: r.Skipped, Note: r.Note})
	}
	return rows
}

// WriteJSON prints the results as a JSON list of objects.
func WriteJSON(w io.Writer, meta Meta, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Rows(meta, results))
}

// csvHeader names the CSV columns; empty cells are absent numbers.
var csvHeader = []string{"op", "backend", "seq", "median_ms", "min_ms", "max_ms", "cpu_ms", "runs", "gflop", "gflops", "gbps",
	"penalty", "max_abs_vs_naive", "rel_l2_vs_naive", "shape", "dtype", "skipped", "note"}

// WriteCSV writes the results with a header row.
func WriteCSV(w io.Writer, meta Meta, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'g', 6, 64)
	}
	for _, r := range Rows(meta, results) {
		rec := []string{r.Op, r.Backend, strconv.Itoa(r.Seq), f(r.MedianMS), f(r.MinMS), f(r.MaxMS), f(r.CPUMS), strconv.Itoa(r.Runs),
			strconv.FormatFloat(r.GFLOP, 'g', 6, 64), f(r.GFLOPS), f(r.GBPS), f(r.Penalty), f(r.MaxAbsVsNaive), f(r.RelL2VsNaive),
			r.Shape, r.DType, r.Skipped, r.Note}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
