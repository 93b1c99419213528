package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/qwenref/qwenref/model"
)

// SpeedOptions are llama-bench's tests of a whole model: pp<Prompt>, a
// prefill of Prompt tokens, and tg<Gen>, Gen tokens decoded one at a time
// from an empty cache, each timed Reps times after Warmup untimed runs.
type SpeedOptions struct {
	Prompt, Gen  int
	Reps, Warmup int
	Seed         uint64 // the random token ids
	Backends     []string
	Progress     io.Writer // one line per test as it starts (nil: none)
	Filename     string    // the checkpoint, for model_filename
}

// SpeedResult is one test on one backend, with llama-bench's fields in
// its order (its JSON keys and CSV columns); the fields llama.cpp's own
// settings fill (cache types, GPU layers, split mode, ...) are left out.
// The prompt is prefilled as one batch, so n_batch and n_ubatch are its
// length.
type SpeedResult struct {
	BuildCommit   string `json:"build_commit"`
	BuildNumber   int    `json:"build_number"`
	CPUInfo       string `json:"cpu_info"`
	GPUInfo       string `json:"gpu_info"`
	Backend       string `json:"backends"`
	ModelFilename string `json:"model_filename"`
	Model         string `json:"model_type"`
	Size          int64  `json:"model_size"`
	Params        int64  `json:"model_n_params"`
	NBatch        int    `json:"n_batch"`
	NUBatch       int    `json:"n_ubatch"`
	Threads       int    `json:"n_threads"`
	NPrompt       int    `json:"n_prompt"`
	NGen          int    `json:"n_gen"`
	NDepth        int    `json:"n_depth"`
	TestTime      string `json:"test_time"`
	// AvgNS and StddevNS are the repetitions' mean time and its sample
	// standard deviation; AvgTS and StddevTS the same of their tokens per
	// second; SamplesNS and SamplesTS the repetitions themselves.
	AvgNS     int64     `json:"avg_ns"`
	StddevNS  int64     `json:"stddev_ns"`
	AvgTS     float64   `json:"avg_ts"`
	StddevTS  float64   `json:"stddev_ts"`
	SamplesNS []int64   `json:"samples_ns"`
	SamplesTS []float64 `json:"samples_ts"`
	// Test is the table's name of the test: pp512, tg128.
	Test string `json:"-"`
}

// ModelSpeed runs the pp and tg tests on every backend.
func ModelSpeed(m *model.Model, o SpeedOptions) ([]SpeedResult, error) {
	if o.Reps < 1 || o.Warmup < 0 || o.Prompt < 0 || o.Gen < 0 || o.Prompt+o.Gen == 0 {
		return nil, fmt.Errorf("want at least one repetition and a pp or tg test, got reps %d, pp %d, tg %d", o.Reps, o.Prompt, o.Gen)
	}
	var out []SpeedResult
	env := CurrentEnv()
	for _, spec := range o.Backends {
		be, err := model.ParseBackend(spec)
		if err != nil {
			return nil, err
		}
		r, err := model.NewRunner(m, be, 1)
		if err != nil {
			be.Close()
			return nil, err
		}
		for _, t := range []struct{ p, g int }{{o.Prompt, 0}, {0, o.Gen}} {
			if t.p+t.g == 0 {
				continue
			}
			res := SpeedResult{BuildCommit: env.Commit, CPUInfo: env.CPUModel, ModelFilename: o.Filename, Model: modelLabel(m),
				Size: m.WeightBytes(), Params: m.Config.TextParams(), Backend: be.Name, NBatch: t.p, NUBatch: t.p,
				Threads: runtime.GOMAXPROCS(0), NPrompt: t.p, NGen: t.g, Test: fmt.Sprintf("pp%d", t.p),
				TestTime: time.Now().UTC().Format(time.RFC3339)}
			if t.g > 0 {
				res.Test = fmt.Sprintf("tg%d", t.g)
			}
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "bench: %s on %s, %d warm-up and %d timed runs\n", res.Test, be.Name, o.Warmup, o.Reps)
			}
			if err = speedTest(r, m.Config.VocabSize, t.p, t.g, o, &res); err != nil {
				break
			}
			out = append(out, res)
		}
		r.Close()
		be.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec, err)
		}
	}
	return out, nil
}

// speedTest times one test: random ids (the same each run), fresh caches.
func speedTest(r model.Runner, vocab, prompt, gen int, o SpeedOptions, res *SpeedResult) error {
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	ids := make([]int, max(prompt, gen))
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	once := func(n int) error {
		if err := r.Reset(); err != nil {
			return err
		}
		if prompt > 0 {
			_, err := r.Forward([][]int{ids[:n]}, model.RunOptions{Logits: model.LastLogits})
			return err
		}
		for _, id := range ids[:n] {
			if _, err := r.Forward([][]int{{id}}, model.RunOptions{Logits: model.LastLogits}); err != nil {
				return err
			}
		}
		return nil
	}
	for range o.Warmup {
		if err := once(max(prompt, min(gen, 1))); err != nil { // llama-bench warms tg up with one token
			return err
		}
	}
	ns := make([]float64, 0, o.Reps)
	for range o.Reps {
		start := time.Now()
		if err := once(len(ids)); err != nil {
			return err
		}
		d := time.Since(start)
		ns = append(ns, float64(d.Nanoseconds()))
		res.SamplesNS = append(res.SamplesNS, d.Nanoseconds())
		res.SamplesTS = append(res.SamplesTS, float64(len(ids))/d.Seconds())
	}
	avg, sd := meanSD(ns)
	res.AvgNS, res.StddevNS = int64(avg), int64(sd)
	res.AvgTS, res.StddevTS = meanSD(res.SamplesTS)
	return nil
}

// meanSD is the mean and the sample standard deviation (0 for one value).
func meanSD(x []float64) (mean, sd float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-1))
}

// modelLabel is llama-bench's model column: the type, the size and the
// weights' storage, e.g. "qwen3_5_text 0.8B BF16".
func modelLabel(m *model.Model) string {
	var bf16, f32 int64
	for _, x := range m.Matrices() {
		if x.BF16 != nil {
			bf16 += x.Bytes()
		} else {
			f32 += x.Bytes()
		}
	}
	dtype := "BF16"
	if f32 > bf16 {
		dtype = "F32"
	}
	p := float64(m.Config.TextParams())
	size := fmt.Sprintf("%.3gM", p/1e6)
	if p >= 1e9 {
		size = fmt.Sprintf("%.3gB", p/1e9)
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s %s", m.Config.ModelType, size, dtype))
}

// WriteSpeedTable prints the results as llama-bench's markdown table.
func WriteSpeedTable(w io.Writer, rs []SpeedResult) error {
	cols := []struct {
		name  string
		width int // negative: left-aligned
		value func(SpeedResult) string
	}{
		{"model", -30, func(r SpeedResult) string { return r.Model }},
		{"size", 10, func(r SpeedResult) string { return humanBytes(r.Size) }},
		{"params", 10, func(r SpeedResult) string { return humanCount(r.Params) }},
		{"backend", -10, func(r SpeedResult) string { return r.Backend }},
		{"threads", 7, func(r SpeedResult) string { return fmt.Sprint(r.Threads) }},
		{"test", 15, func(r SpeedResult) string { return r.Test }},
		{"t/s", 20, func(r SpeedResult) string { return fmt.Sprintf("%.2f ± %.2f", r.AvgTS, r.StddevTS) }},
	}
	var b strings.Builder
	row := func(cell func(i int) (string, int)) {
		b.WriteString("|")
		for i := range cols {
			s, width := cell(i)
			fmt.Fprintf(&b, " %*s |", width, s)
		}
		b.WriteString("\n")
	}
	row(func(i int) (string, int) { return cols[i].name, cols[i].width })
	b.WriteString("|")
	for _, c := range cols {
		end := "-"
		if c.width > 0 {
			end = ":"
		}
		fmt.Fprintf(&b, " %s%s |", strings.Repeat("-", abs(c.width)-1), end)
	}
	b.WriteString("\n")
	for _, r := range rs {
		row(func(i int) (string, int) { return cols[i].value(r), cols[i].width })
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SpeedFormats are the output formats of WriteSpeed, as llama-bench's -o
// (table is md).
var SpeedFormats = []string{"md", "table", "csv", "json", "jsonl"}

// WriteSpeed prints the results in one of SpeedFormats: llama-bench's
// markdown table, CSV with its header, a JSON array, or an object a line.
func WriteSpeed(w io.Writer, format string, rs []SpeedResult) error {
	switch format {
	case "md", "table":
		return WriteSpeedTable(w, rs)
	case "json":
		out, err := json.MarshalIndent(rs, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(out))
		return err
	case "jsonl":
		enc := json.NewEncoder(w)
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		return writeSpeedCSV(w, rs)
	}
	return fmt.Errorf("output format %q: want one of %s", format, strings.Join(SpeedFormats, ", "))
}

// writeSpeedCSV writes llama-bench's CSV: its fields in order, without the
// samples (JSON only, as in llama-bench).
func writeSpeedCSV(w io.Writer, rs []SpeedResult) error {
	cw := csv.NewWriter(w)
	var header []string
	for _, r := range rs {
		var m map[string]any
		b, _ := json.Marshal(r)
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return err
		}
		if header == nil {
			header = jsonKeys(r)
			if err := cw.Write(header); err != nil {
				return err
			}
		}
		row := make([]string, len(header))
		for i, k := range header {
			row[i] = fmt.Sprint(m[k])
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonKeys are v's JSON keys in field order, the samples left out.
func jsonKeys(v any) []string {
	var keys []string
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		k, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if k != "" && k != "-" && !strings.HasPrefix(k, "samples_") {
			keys = append(keys, k)
		}
	}
	return keys
}

func humanBytes(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func humanCount(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f B", float64(n)/1e9)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
