package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/model"
)

// The CPU ceiling the report measures against (docs/anchors.md has its
// provenance); a device backend brings its own (model.Device.Ceiling).
const (
	// CPUCeilingGFLOPS is the project CPU's float32 matmul ceiling: OpenBLAS
	// sgemm 2048×5120×5120 reached 174–199 GFLOP/s on its 2 vCPUs. It is a
	// practical ceiling, not the hardware peak: the cores are Zen 5 (cpuinfo
	// family 26) with full-width AVX-512, and a good GEMM can beat it.
	CPUCeilingGFLOPS = 200
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
	// Env is the build and machine, recorded in every row.
	Env Env
	// Loads holds the load average after each (op, T) group (LoadKey);
	// rows without one get Env.Load, the load at the start.
	Loads map[string][3]float64
}

// LoadKey keys Meta.Loads.
func LoadKey(op string, seq int) string { return op + "/" + strconv.Itoa(seq) }

// Env is what a result needs to be compared across machines, as
// llama-bench records it: the commit and build, the kernel level, the CPU,
// the parallelism and the load.
type Env struct {
	Commit     string     `json:"commit"`
	Build      string     `json:"build"`
	Kernels    string     `json:"kernels"`
	BF16       string     `json:"bf16_kernel"` // what matmul=bf16 and chunked-bf16 run
	CPUModel   string     `json:"cpu_model"`
	GOMAXPROCS int        `json:"gomaxprocs"`
	NumCPU     int        `json:"num_cpu"`
	GoVersion  string     `json:"go"`
	Load       [3]float64 `json:"load_avg"`
}

// CurrentEnv describes this process: the vcs commit stamped by go build
// ("unknown" under go run or go test), the build ("default", or the
// GOEXPERIMENT and build tags), the kernel level (internal/cpu), the CPU
// model from /proc/cpuinfo, GOMAXPROCS and the load average now.
func CurrentEnv() Env {
	e := Env{Commit: "unknown", Build: "default", Kernels: cpu.Describe(), BF16: model.CPUKernels().BF16, CPUModel: cpuModel(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version()}
	var build []string
	if _, exp, ok := strings.Cut(runtime.Version(), " X:"); ok {
		build = append(build, "GOEXPERIMENT="+exp)
		e.GoVersion, _, _ = strings.Cut(runtime.Version(), " ")
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		dirty := ""
		for _, st := range bi.Settings {
			switch {
			case st.Key == "vcs.revision":
				e.Commit = st.Value
			case st.Key == "vcs.modified" && st.Value == "true":
				dirty = "+dirty"
			case st.Key == "-tags" && st.Value != "":
				build = append(build, "tags="+st.Value)
			}
		}
		if e.Commit != "unknown" {
			e.Commit += dirty
		}
	}
	if len(build) > 0 {
		e.Build = strings.Join(build, " ")
	}
	e.Load, _ = LoadAvg()
	return e
}

// LoadAvg reads the 1, 5 and 15 minute load averages (Linux; false elsewhere).
func LoadAvg() ([3]float64, bool) {
	var l [3]float64
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l, false
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return l, false
	}
	for i := range l {
		if l[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return l, false
		}
	}
	return l, true
}

// cpuModel is /proc/cpuinfo's model name with its family and model
// numbers (the name alone can be as vague as "AMD EPYC"), or GOARCH.
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	var name, family, model string
	for _, l := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			if name != "" {
				break // the first processor is enough
			}
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			name = strings.TrimSpace(v)
		case "cpu family":
			family = strings.TrimSpace(v)
		case "model":
			model = strings.TrimSpace(v)
		}
	}
	if name == "" {
		return runtime.GOARCH
	}
	if family != "" {
		name += fmt.Sprintf(" (family %s, model %s)", family, model)
	}
	return name
}

// loadFor is the load average recorded for an (op, T) group.
func (m Meta) loadFor(op string, seq int) [3]float64 {
	if l, ok := m.Loads[LoadKey(op, seq)]; ok {
		return l
	}
	return m.Env.Load
}

// Caption names what a result was measured on: shape and build on the
// first line, the machine on the second.
func (m Meta) Caption() string {
	e := m.Env
	return fmt.Sprintf("shape %s, %s weights · build %s · kernels %s · commit %s\n%s · GOMAXPROCS=%d · load average %.1f at start",
		m.Shape, m.DType, e.Build, e.Kernels, shortCommit(e.Commit), e.CPUModel, e.GOMAXPROCS, e.Load[0])
}

func shortCommit(c string) string {
	if len(c) > 12 && !strings.HasPrefix(c, "unknown") {
		return c[:12]
	}
	return c
}

// ceiling returns the GFLOP/s and GB/s ceilings of a result's device:
// its backend's device's, or the CPU's.
func (m Meta) ceiling(r Result) (gflops, gbps float64) {
	if r.Ceiling.GFLOPS > 0 {
		return r.Ceiling.GFLOPS, r.Ceiling.GBPS
	}
	c := m.CPUCeiling
	if c <= 0 {
		c = CPUCeilingGFLOPS
	}
	return c, m.CPUCopyGBPS
}

// deviceCeilings describes the device ceilings of the results' backends,
// e.g. "; cuda: 694 TFLOP/s, 4.25 TB/s copy (bf16 GEMM; H200, anchors)".
func deviceCeilings(results []Result) string {
	var order []model.Ceiling
	names := map[model.Ceiling][]string{}
	for _, r := range results {
		if r.Ceiling.GFLOPS <= 0 {
			continue
		}
		if _, ok := names[r.Ceiling]; !ok {
			order = append(order, r.Ceiling)
		}
		if !slices.Contains(names[r.Ceiling], r.Backend) {
			names[r.Ceiling] = append(names[r.Ceiling], r.Backend)
		}
	}
	var b strings.Builder
	for _, c := range order {
		fmt.Fprintf(&b, "; %s: %g TFLOP/s, %g TB/s copy (%s)", strings.Join(names[c], ", "), c.GFLOPS/1000, c.GBPS/1000, c.About)
	}
	return b.String()
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
	if e := meta.Env; e.Kernels != "" {
		fmt.Fprintf(&b, "build: %s, kernels %s, bf16 %s, commit %s, %s; load average %.2f %.2f %.2f at start\n",
			e.Build, e.Kernels, e.BF16, e.Commit, e.GoVersion, e.Load[0], e.Load[1], e.Load[2])
	}
	cpu, _ := meta.ceiling(Result{})
	fmt.Fprintf(&b, "ceilings (%%ceil): CPU ≈ %g GFLOP/s fp32 (OpenBLAS sgemm on the project's 2 vCPUs, anchors; not the FMA peak)", cpu)
	if meta.CPUCopyGBPS > 0 {
		fmt.Fprintf(&b, ", CPU copy %.3g GB/s (measured at start)", meta.CPUCopyGBPS)
	}
	fmt.Fprintf(&b, "%s\n", deviceCeilings(results))
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
				fmt.Fprintf(&b, "%7s  %-*s %8.3g %10s  %-23s %10s %5s %9s %6s %9s %9s %9s  %s\n",
					seqLabel(r), bw, r.Backend, r.GFLOP, "–", "", "", "", "", "", "", "", "", r.Skipped)
				continue
			}
			gf, gb := meta.ceiling(r)
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
			fmt.Fprintf(&b, "%7s  %-*s %8.3g %10s  %-23s %10s %5d %9s %6s %9s %9s %9s  %s\n",
				seqLabel(r), bw, r.Backend, r.GFLOP, fmtDur(r.Median), "("+fmtDur(r.Min)+" – "+fmtDur(r.Max)+")", cpu, r.Runs,
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

// seqLabel is T, or T×B for B > 1 batch rows.
func seqLabel(r Result) string {
	if r.Rows > 1 {
		return fmt.Sprintf("%d×%d", r.Seq, r.Rows)
	}
	return strconv.Itoa(r.Seq)
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
	Op            string     `json:"op"`
	Backend       string     `json:"backend"`
	Seq           int        `json:"seq"`
	Rows          int        `json:"rows"`
	MedianMS      *float64   `json:"median_ms"`
	MinMS         *float64   `json:"min_ms"`
	MaxMS         *float64   `json:"max_ms"`
	CPUMS         *float64   `json:"cpu_ms"`
	GFLOPS        *float64   `json:"gflops"`
	RelL2VsNaive  *float64   `json:"rel_l2_vs_naive"`
	MaxAbsVsNaive *float64   `json:"max_abs_vs_naive"`
	GBPS          *float64   `json:"gbps,omitempty"`
	Penalty       *float64   `json:"penalty"`
	GFLOP         float64    `json:"gflop"`
	Runs          int        `json:"runs"`
	Cold          bool       `json:"cold,omitempty"`
	Shape         string     `json:"shape"`
	DType         string     `json:"dtype"`
	Skipped       string     `json:"skipped,omitempty"`
	Note          string     `json:"note,omitempty"`
	Commit        string     `json:"commit"`
	Build         string     `json:"build"`
	Kernels       string     `json:"kernels"`
	CPUModel      string     `json:"cpu_model"`
	GOMAXPROCS    int        `json:"gomaxprocs"`
	LoadAvg       [3]float64 `json:"load_avg"`
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
		rows = append(rows, Row{Op: r.Op, Backend: r.Backend, Seq: r.Seq, Rows: max(r.Rows, 1),
			MedianMS: ms(r.Median, ran), MinMS: ms(r.Min, ran), MaxMS: ms(r.Max, ran), CPUMS: ms(r.CPU, ran && r.CPU >= 0),
			GFLOPS: num(r.GFLOPS), RelL2VsNaive: num(r.RelL2VsNaive), MaxAbsVsNaive: num(r.MaxAbsVsNaive),
			GBPS: num(r.GBPS), Penalty: num(r.Penalty), GFLOP: r.GFLOP, Runs: r.Runs, Cold: r.Cold,
			Shape: meta.Shape, DType: meta.DType, Skipped: r.Skipped, Note: r.Note,
			Commit: meta.Env.Commit, Build: meta.Env.Build, Kernels: meta.Env.Kernels, CPUModel: meta.Env.CPUModel,
			GOMAXPROCS: meta.Env.GOMAXPROCS, LoadAvg: meta.loadFor(r.Op, r.Seq)})
	}
	return rows
}

// Formats are the output formats WriteFormat knows.
var Formats = []string{"table", "md", "csv", "json", "jsonl"}

// WriteFormat writes the results in one of Formats.
func WriteFormat(w io.Writer, format string, meta Meta, results []Result) error {
	switch format {
	case "table":
		return WriteTable(w, meta, results)
	case "md":
		return WriteMarkdown(w, meta, results)
	case "csv":
		return WriteCSV(w, meta, results)
	case "json":
		return WriteJSON(w, meta, results)
	case "jsonl":
		return WriteJSONL(w, meta, results)
	}
	return fmt.Errorf("unknown format %q (known: %s)", format, strings.Join(Formats, ", "))
}

// WriteJSONL prints one JSON object per result per line.
func WriteJSONL(w io.Writer, meta Meta, results []Result) error {
	enc := json.NewEncoder(w)
	for _, r := range Rows(meta, results) {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// WriteMarkdown prints a caption and one Markdown table per op.
func WriteMarkdown(w io.Writer, meta Meta, results []Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "qwenref bench · %s\n", strings.ReplaceAll(meta.Caption(), "\n", " · "))
	if meta.Command != "" {
		fmt.Fprintf(&b, "\n`%s`\n", meta.Command)
	}
	for _, op := range groupOps(results) {
		o, _ := LookupOp(op)
		fmt.Fprintf(&b, "\n**%s**: %s\n\n", op, o.About)
		b.WriteString("| T | backend | median | min – max | cpu | runs | GFLOP/s | penalty | max abs Δ vs naive | rel L2 vs naive | note |\n")
		b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
		for _, r := range results {
			if r.Op != op {
				continue
			}
			if !r.Ran() {
				fmt.Fprintf(&b, "| %s | %s | – | | | | | | | | %s |\n", seqLabel(r), mdEscape(r.Backend), mdEscape(r.Skipped))
				continue
			}
			val := r.GFLOPS
			if o.Bytes != nil {
				val = r.GBPS
			}
			cpuT := "–"
			if r.CPU >= 0 {
				cpuT = fmtDur(r.CPU)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s – %s | %s | %d | %s | %s | %s | %s | %s |\n", seqLabel(r), mdEscape(r.Backend), fmtDur(r.Median),
				fmtDur(r.Min), fmtDur(r.Max), cpuT, r.Runs, fmtNum(val, "%.3g"), fmtPenalty(r.Penalty),
				fmtNum(r.MaxAbsVsNaive, "%.2g"), fmtNum(r.RelL2VsNaive, "%.2g"), mdEscape(r.Note))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// WriteJSON prints the results as a JSON list of objects.
func WriteJSON(w io.Writer, meta Meta, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Rows(meta, results))
}

// csvHeader names the CSV columns; empty cells are absent numbers.
var csvHeader = []string{"op", "backend", "seq", "median_ms", "min_ms", "max_ms", "cpu_ms", "runs", "gflop", "gflops", "gbps",
	"penalty", "max_abs_vs_naive", "rel_l2_vs_naive", "shape", "dtype", "skipped", "note",
	"commit", "build", "kernels", "cpu_model", "gomaxprocs", "load_1m", "load_5m", "load_15m", "rows"}

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
			r.Shape, r.DType, r.Skipped, r.Note,
			r.Commit, r.Build, r.Kernels, r.CPUModel, strconv.Itoa(r.GOMAXPROCS),
			strconv.FormatFloat(r.LoadAvg[0], 'f', 2, 64), strconv.FormatFloat(r.LoadAvg[1], 'f', 2, 64), strconv.FormatFloat(r.LoadAvg[2], 'f', 2, 64),
			strconv.Itoa(r.Rows)}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
