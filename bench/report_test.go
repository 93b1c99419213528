package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// sample results: one op, two T, naive skipped at the larger T.
func sampleResults() (Meta, []Result) {
	cfg, _ := model.ShapeConfig("tiny")
	meta := Meta{Shape: "tiny", Config: cfg, DType: "bf16", Seed: 1, Method: Method{Warmup: 1, Reps: 3}, Naive: 1,
		Env:   Env{Commit: "0123456789abcdef", Build: "default", Kernels: "avx512 (AVX512_BF16)", CPUModel: "AMD EPYC (family 26, model 2)", GOMAXPROCS: 2, Load: [3]float64{1.5, 1.25, 1}},
		Loads: map[string][3]float64{LoadKey("gdn-core", 64): {3, 2, 1}}}
	ms := time.Millisecond
	nan := math.NaN()
	rs := []Result{
		{Op: "gdn-core", Backend: "naive", Seq: 8, Stats: Stats{Median: 40 * ms, Min: 30 * ms, Max: 50 * ms, Runs: 3}, CPU: 39 * ms,
			GFLOP: 0.5, GFLOPS: 12.5, GBPS: nan, Penalty: 4, MaxAbsVsNaive: 0, RelL2VsNaive: 0},
		{Op: "gdn-core", Backend: "chunked", Seq: 8, Stats: Stats{Median: 10 * ms, Min: 9 * ms, Max: 12 * ms, Runs: 3}, CPU: 18 * ms,
			GFLOP: 0.5, GFLOPS: 50, GBPS: nan, Penalty: 1, MaxAbsVsNaive: 1e-6, RelL2VsNaive: 3e-7},
		{Op: "gdn-core", Backend: "naive", Seq: 64, GFLOP: 4, GFLOPS: nan, GBPS: nan, Penalty: nan,
			MaxAbsVsNaive: nan, RelL2VsNaive: nan, Skipped: "naive skipped: 4 GFLOP > --naive-max-gflop 1"},
		{Op: "gdn-core", Backend: "chunked", Seq: 64, Stats: Stats{Median: 80 * ms, Min: 80 * ms, Max: 80 * ms, Runs: 1}, CPU: -1,
			GFLOP: 4, GFLOPS: 50, GBPS: nan, Penalty: 1, MaxAbsVsNaive: nan, RelL2VsNaive: nan, Note: "naive skipped: 4 GFLOP > --naive-max-gflop 1"},
	}
	return meta, rs
}

func TestJSONShape(t *testing.T) {
	meta, rs := sampleResults()
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, meta, rs))
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rows))
	require.Len(t, rows, 4)
	required := []string{"op", "backend", "seq", "median_ms", "min_ms", "max_ms", "gflops", "rel_l2_vs_naive"}
	for _, r := range rows {
		for _, k := range required {
			assert.Contains(t, r, k, "every row has every required key, null or not")
		}
		assert.NotContains(t, r, "gbps", "gdn-core is not memory-bound")
	}
	assert.Equal(t, "gdn-core", rows[0]["op"])
	assert.Equal(t, "chunked", rows[1]["backend"])
	assert.Equal(t, 8.0, rows[1]["seq"])
	assert.Equal(t, 10.0, rows[1]["median_ms"])
	assert.Equal(t, 9.0, rows[1]["min_ms"])
	assert.Equal(t, 12.0, rows[1]["max_ms"])
	assert.Equal(t, 18.0, rows[1]["cpu_ms"])
	assert.Nil(t, rows[3]["cpu_ms"], "unknown CPU time is null")
	assert.Nil(t, rows[2]["cpu_ms"], "skipped")
	assert.Equal(t, 50.0, rows[1]["gflops"])
	assert.Equal(t, 3e-7, rows[1]["rel_l2_vs_naive"])
	assert.Equal(t, 4.0, rows[0]["penalty"])
	// Skipped naive: times and difference are null, the reason is given.
	assert.Nil(t, rows[2]["median_ms"])
	assert.Nil(t, rows[2]["gflops"])
	assert.Contains(t, rows[2]["skipped"], "--naive-max-gflop")
	assert.Nil(t, rows[3]["rel_l2_vs_naive"])
	assert.Equal(t, 80.0, rows[3]["median_ms"])
}

func TestJSONNonFiniteIsNull(t *testing.T) {
	meta, rs := sampleResults()
	rs[1].RelL2VsNaive = math.Inf(1)
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, meta, rs[:2]), "encoding/json rejects Inf: it must become null")
	assert.Contains(t, buf.String(), `"rel_l2_vs_naive": null`)
}

func TestTable(t *testing.T) {
	meta, rs := sampleResults()
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, meta, rs))
	s := buf.String()
	for _, want := range []string{"shape tiny", "≈ 200 GFLOP/s", "== gdn-core", "7·d_k·d_v", "4.00×", "1.00×", "3e-07",
		"naive skipped: 4 GFLOP > --naive-max-gflop 1", "(30 ms – 50 ms)", "25%", "39 ms"} {
		assert.Contains(t, s, want)
	}
	for _, l := range strings.Split(s, "\n") {
		assert.Equal(t, strings.TrimRight(l, " "), l, "no trailing blanks")
	}
}

func TestCSV(t *testing.T) {
	meta, rs := sampleResults()
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, meta, rs))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 5)
	assert.Equal(t, strings.Join(csvHeader, ","), lines[0])
	assert.True(t, strings.HasPrefix(lines[2], "gdn-core,chunked,8,10,9,12,18,3,"), lines[2])
	assert.True(t, strings.HasPrefix(lines[3], "gdn-core,naive,64,,,,,0,4,,"), "absent numbers are empty cells: %s", lines[3])
	assert.True(t, strings.HasSuffix(lines[1], ",0123456789abcdef,default,avx512 (AVX512_BF16),\"AMD EPYC (family 26, model 2)\",2,1.50,1.25,1.00,1"), lines[1])
	assert.True(t, strings.HasSuffix(lines[3], ",2,3.00,2.00,1.00,1"), "the load after the group: %s (rows last)", lines[3])
}

// Every record carries the build and machine, so files from two machines
// can be compared.
func TestRecordsCarryEnv(t *testing.T) {
	meta, rs := sampleResults()
	var buf bytes.Buffer
	require.NoError(t, WriteFormat(&buf, "jsonl", meta, rs))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, len(rs))
	for _, l := range lines {
		var row map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &row), l)
		for _, k := range []string{"commit", "build", "kernels", "cpu_model", "gomaxprocs", "load_avg"} {
			assert.Contains(t, row, k)
		}
		assert.Equal(t, "avx512 (AVX512_BF16)", row["kernels"])
	}
	env := CurrentEnv()
	assert.NotEmpty(t, env.Kernels)
	assert.NotEmpty(t, env.CPUModel)
	assert.Positive(t, env.GOMAXPROCS)
	assert.NotEmpty(t, env.Commit)
	assert.Regexp(t, `^(default|(GOEXPERIMENT=\S+ ?)?(tags=\S+)?)$`, env.Build)
}

func TestFormats(t *testing.T) {
	meta, rs := sampleResults()
	for _, f := range Formats {
		var buf bytes.Buffer
		require.NoError(t, WriteFormat(&buf, f, meta, rs), f)
		assert.NotEmpty(t, buf.String(), f)
	}
	var buf bytes.Buffer
	require.NoError(t, WriteFormat(&buf, "md", meta, rs))
	md := buf.String()
	assert.Contains(t, md, "| T | backend |")
	assert.Contains(t, md, "| 8 | chunked | 10 ms | 9 ms – 12 ms |")
	assert.Contains(t, md, "shape tiny")
	assert.Error(t, WriteFormat(&buf, "xml", meta, rs))
}

func TestTicks(t *testing.T) {
	var labels []string
	for _, tk := range seqTicks([]int{512, 2048, 8192}).Ticks(300, 10000) {
		labels = append(labels, tk.Label)
	}
	assert.Equal(t, []string{"512", "2048", "8192"}, labels, "a tick at each measured T, none else")
	labels = nil
	for _, tk := range (steps125Ticks{suffix: "×"}).Ticks(0.8, 60) {
		labels = append(labels, tk.Label)
	}
	assert.Equal(t, []string{"1×", "2×", "5×", "10×", "20×", "50×"}, labels)
	labels = nil
	for _, tk := range (linearTicks{suffix: "×"}).Ticks(0, 5.6) {
		labels = append(labels, tk.Label)
	}
	assert.Equal(t, []string{"0×", "1×", "2×", "3×", "4×", "5×"}, labels)
}

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	require.NoError(t, WriteAtomic(p, func(w io.Writer) error { _, err := io.WriteString(w, "one"); return err }))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "one", string(got))

	boom := errors.New("boom")
	err = WriteAtomic(p, func(w io.Writer) error { io.WriteString(w, "half"); return boom })
	assert.ErrorIs(t, err, boom)
	got, err = os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "one", string(got), "a failed write leaves the old file whole")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left")

	assert.Error(t, WriteAtomic(filepath.Join(dir, "missing", "f"), func(io.Writer) error { return nil }))
}

func TestWriteFiles(t *testing.T) {
	meta, rs := sampleResults()
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, WriteData(dir, meta, rs))
	paths, err := WritePlots(dir, meta, rs)
	require.NoError(t, err)
	assert.Len(t, paths, 4, "time and penalty, SVG and PNG, for the one op")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"results.csv", "results.json", "report.txt",
		"time-gdn-core.svg", "time-gdn-core.png", "penalty-gdn-core.svg", "penalty-gdn-core.png"}, names)
	svg, err := os.ReadFile(filepath.Join(dir, "penalty-gdn-core.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<svg")
	assert.Contains(t, string(svg), "4×", "dots are labelled with the penalty")
	assert.Contains(t, string(svg), "shape tiny", "a caption names the shape")
	assert.Contains(t, string(svg), "AMD EPYC", "and the machine")
	png, err := os.ReadFile(filepath.Join(dir, "time-gdn-core.png"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n")))

	// An op with nothing timed gets no charts.
	paths, err = WritePlots(t.TempDir(), meta, rs[2:3])
	require.NoError(t, err)
	assert.Empty(t, paths)
}

// PrepareDataDir refuses a directory WriteData could not write into (a
// directory where report.txt goes), so a sweep fails before it starts.
func TestPrepareDataDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, PrepareDataDir(dir))
	meta, rs := sampleResults()
	require.NoError(t, WriteData(dir, meta, rs))
	require.NoError(t, PrepareDataDir(dir), "its own files may be replaced")
	require.NoError(t, os.Remove(filepath.Join(dir, "report.txt")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "report.txt"), 0o755))
	err := PrepareDataDir(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "report.txt: refusing to replace a directory")
}

func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	m := Method{Warmup: 1, Reps: 2}
	p := newProgress(&buf, false, m)
	p.plan([]planned{{op: "a", backend: "x", gflop: 1}, {op: "a", backend: "x", gflop: 3}, {op: "a", backend: "y", gflop: 1}})
	assert.Equal(t, "ETA ?", p.etaString(), "no rate known yet")
	p.start("a", 8, "x", "")
	p.done("a", 8, "x", 1, []time.Duration{time.Second, time.Second}, "")
	// x: 1 s per GFLOP per run; the next case is 3 GFLOP × 3 runs; y is unknown.
	eta, partial := p.eta()
	assert.Equal(t, 9*time.Second, eta)
	assert.True(t, partial)
	assert.Contains(t, buf.String(), "[1/3] a T=8 x: 1 s median of 2")
	assert.Contains(t, buf.String(), "ETA > 9 s")
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"), "a line per case")

	// On a terminal the line is rewritten in place.
	buf.Reset()
	p = newProgress(&buf, true, m)
	p.plan([]planned{{op: "a", backend: "x", gflop: 1}})
	p.start("a", 8, "x", "")
	p.tick("x", -1)
	p.tick("x", 0)
	p.done("a", 8, "x", 1, []time.Duration{time.Millisecond}, "")
	p.finish()
	s := buf.String()
	assert.Equal(t, 1, strings.Count(s, "\n"), "one line, ended at finish")
	assert.Equal(t, 4, strings.Count(s, "\r"))
	assert.Contains(t, s, "x warm-up")
	assert.Contains(t, s, "x run 1")
}
