package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bench"
	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/model"
)

func benchCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(append([]string{"bench"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// quick flags keep the tiny end-to-end runs to one run per case.
var quick = []string{"--shape", "tiny", "--seq", "8,16", "--reps", "1", "--warmup", "0", "--min-time", "0"}

func TestBenchJSONEndToEnd(t *testing.T) {
	code, stdout, stderr := benchCLI(append(quick, "--op", "all", "--json")...)
	require.Equal(t, 0, code, stderr)

	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows), stdout)
	backends := bench.AvailableBackends(model.BackendNames(), io.Discard) // a cuda build without a GPU skips cuda
	// The tiny shape is dense: the sweep drops op moe.
	nOps := len(bench.Ops())
	if _, ok := bench.LookupOp("moe"); ok {
		nOps--
	}
	require.Len(t, rows, nOps*2*len(backends), "one row per op × T × backend")

	ops := map[string]bool{}
	for _, r := range rows {
		for _, k := range []string{"op", "backend", "seq", "median_ms", "min_ms", "max_ms", "gflops", "rel_l2_vs_naive"} {
			require.Contains(t, r, k)
		}
		require.IsType(t, "", r["op"])
		require.IsType(t, "", r["backend"])
		require.IsType(t, 0.0, r["seq"])
		for _, k := range []string{"median_ms", "min_ms", "max_ms", "gflops", "rel_l2_vs_naive"} {
			require.IsType(t, 0.0, r[k], "%s in %v: a number (nothing is skipped at tiny)", k, r)
		}
		assert.Contains(t, []float64{8, 16}, r["seq"])
		assert.Contains(t, backends, r["backend"])
		assert.LessOrEqual(t, r["min_ms"], r["median_ms"])
		assert.LessOrEqual(t, r["median_ms"], r["max_ms"])
		switch be, err := model.ParseBackend(r["backend"].(string)); {
		case r["backend"] == "naive":
			assert.Zero(t, r["rel_l2_vs_naive"])
		case err == nil && be.Precision == model.PrecisionBF16:
			// bf16 products: transformers' own bf16 distance (docs/tolerances.md)
			assert.Less(t, r["rel_l2_vs_naive"], 3.3e-2, "%v", r)
		default:
			assert.Less(t, r["rel_l2_vs_naive"], 1e-3, "%v", r)
		}
		ops[r["op"].(string)] = true
	}
	assert.Len(t, ops, nOps)
	assert.False(t, ops["moe"], "no moe block in a dense model")
	assert.Contains(t, stderr, "model T=16", "progress on stderr")
}

func TestBenchTableAndOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "res")
	code, stdout, stderr := benchCLI(append(quick, "--op", "gdn-core,conv", "--out", out)...)
	require.Equal(t, 0, code, stderr)
	for _, s := range []string{"shape tiny", "200 GFLOP/s", "== gdn-core", "== conv", "GB/s", "penalty", "command: qwenref bench --shape tiny"} {
		assert.Contains(t, stdout, s)
	}

	var names []string
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	for _, e := range entries {
		names = append(names, e.Name())
		assert.False(t, strings.HasPrefix(e.Name(), "."), "temporary file left: %s", e.Name())
	}
	for _, want := range []string{"results.csv", "results.json", "report.txt",
		"time-gdn-core.svg", "time-gdn-core.png", "penalty-gdn-core.svg", "penalty-gdn-core.png", "time-conv.svg", "penalty-conv.png"} {
		assert.Contains(t, names, want)
	}
	f, err := os.Open(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, "op", recs[0][0])
	assert.Len(t, recs, 1+2*2*len(bench.AvailableBackends(model.BackendNames(), io.Discard)))
	report, err := os.ReadFile(filepath.Join(out, "report.txt"))
	require.NoError(t, err)
	assert.Equal(t, stdout, string(report), "report.txt is the printed table")
	png, err := os.ReadFile(filepath.Join(out, "time-gdn-core.png"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG")))
}

func TestBenchNaiveBudget(t *testing.T) {
	code, stdout, stderr := benchCLI(append(quick, "--op", "mlp", "--backends", "naive", "--naive-max-gflop", "0", "--json")...)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 2)
	for _, r := range rows {
		assert.Nil(t, r["median_ms"])
		assert.Nil(t, r["rel_l2_vs_naive"])
		assert.Contains(t, r["skipped"], "--naive-max-gflop")
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--op", "gdn"}, `--op "gdn": unknown op`},
		{[]string{"--op", ","}, "empty op list"},
		{[]string{"--seq", "8,x"}, `--seq "8,x"`},
		{[]string{"--seq", "0"}, "not a sequence length"},
		{[]string{"--seq", ""}, "empty list"},
		{[]string{"--backends", "metal"}, `unknown backend "metal"`},
		{[]string{"--backends", ","}, "empty backend list"},
		{[]string{"--backends", "naive:gemm=naive"}, "is not PART=NAME"},
		{[]string{"--dtype", "f16"}, `--dtype "f16"`},
		{[]string{"--reps", "0"}, "--reps 0"},
		{[]string{"--shape", "70b"}, `unknown shape "70b"`},
		{[]string{"--shape", "tiny", "--config", "x.json"}, "one of --shape, --model and --config"},
		{[]string{"--layers", "99", "--op", "model", "--shape", "tiny"}, "--layers 99"},
		{[]string{"--max-mem", "0"}, "-max-mem"},
		{[]string{"--max-memory", "NaN"}, "-max-memory: want a positive number of GiB"},
		{[]string{"--max-memory", "-3"}, "-max-memory: want a positive number of GiB"},
		{[]string{"stray"}, "unexpected argument"},
		// Past int64 in the weights' size: a panic in make before.
		{[]string{"--op", "model", "--vocab", "1801439850948198", "--layers", "1"}, "--vocab must be 0 to 16777216"},
		{[]string{"--ceiling-gflops", "NaN"}, "--ceiling-gflops NaN"},
		{[]string{"--naive-max-gflop", "NaN"}, "--naive-max-gflop NaN"},
		{[]string{"--warmup", "9223372036854775807"}, "at most 10000"}, // warm-up runs have no time limit
		{[]string{"--model", traceGolden, "--reps", "9223372036854775807"}, "at most 10000"},
	} {
		code, stdout, stderr := benchCLI(c.args...)
		assert.Equal(t, 2, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, c.args)
		assert.Empty(t, stdout, c.args)
	}
}

func TestBenchRefuses27BModel(t *testing.T) {
	code, stdout, stderr := benchCLI("--op", "model", "--shape", "27b", "--seq", "8", "--max-mem", "16")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "--layers N")
	assert.Contains(t, stderr, "--model DIR")
}

func TestBenchHelp(t *testing.T) {
	code, stdout, _ := runHelp("bench")
	assert.Equal(t, 0, code)
	for _, s := range []string{"--naive-max-gflop", "gdn-core", "--layers", "7·d_k·d_v"} {
		assert.Contains(t, stdout, s)
	}
}

func runHelp(cmd string) (int, string, string) {
	var o, e bytes.Buffer
	code := Main([]string{"help", cmd}, &o, &e)
	return code, o.String(), e.String()
}

// --model runs a checkpoint's own weights, --config a config's shape.
func TestBenchModelAndConfig(t *testing.T) {
	fast := []string{"--seq", "8", "--reps", "1", "--warmup", "0", "--min-time", "0", "--json"}
	dir := "../../testdata/golden/causal-f32-t70-b2"
	code, stdout, stderr := benchCLI(append(fast, "--model", dir, "--op", "gdn-layer,model", "--backends", "naive")...)
	require.Equal(t, 0, code, stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 2)
	assert.Equal(t, dir, rows[0]["shape"])
	assert.Equal(t, "checkpoint", rows[0]["dtype"])

	code, _, stderr = benchCLI(append(fast, "--model", dir, "--op", "model", "--layers", "2")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "not to --model")

	js, err := model.ShapeConfigJSON("tiny")
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(cfg, js, 0o644))
	code, stdout, stderr = benchCLI(append(fast, "--config", cfg, "--op", "conv", "--backends", "naive")...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows))
	require.Len(t, rows, 1)
	assert.Equal(t, cfg, rows[0]["shape"])

	code, _, stderr = benchCLI(append(fast, "--config", filepath.Join(t.TempDir(), "none.json"))...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--config")
}

// Every format carries the build and machine; --json is --format json.
func TestBenchFormats(t *testing.T) {
	args := append(quick, "--op", "conv", "--backends", "chunked")
	code, stdout, stderr := benchCLI(append(args, "--format", "jsonl")...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.NotEmpty(t, lines)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &row), lines[0])
	for _, k := range []string{"commit", "build", "kernels", "cpu_model", "gomaxprocs", "load_avg"} {
		assert.Contains(t, row, k)
	}
	assert.Equal(t, cpu.Describe(), row["kernels"])

	code, stdout, stderr = benchCLI(append(args, "--format", "csv")...)
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "op,backend,seq,"), stdout)
	assert.Contains(t, strings.SplitN(stdout, "\n", 2)[0], ",commit,build,kernels,cpu_model,gomaxprocs,load_1m")

	code, stdout, stderr = benchCLI(append(args, "--format", "md")...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| T | backend |")

	_, viaJSON, _ := benchCLI(append(args, "--json")...)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(viaJSON), "["), viaJSON)
	code, _, stderr = benchCLI(append(args, "--json", "--format", "csv")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "disagree")
	code, _, stderr = benchCLI(append(args, "--format", "xml")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--format")
}

// With no flag choosing the work the sweep is the quick one (0.8b, short
// T, cheap naive, short cases, plus the unfused-GDN mix); any such flag
// keeps the full defaults, and flags given keep their values.
func TestBenchQuickDefault(t *testing.T) {
	run := func(set map[string]bool) (bool, string, string, float64, time.Duration) {
		shape, seq, naive, maxT := "27b", "512,2048,8192", 30.0, time.Minute
		if set["max-time"] {
			maxT = 2 * time.Second
		}
		q := bench.QuickSweep(set, &shape, &seq, &naive, &maxT)
		return q, shape, seq, naive, maxT
	}
	q, shape, seq, naive, maxT := run(map[string]bool{"out": true, "format": true})
	assert.True(t, q)
	assert.Equal(t, []any{"0.8b", "128,512", 1.0, 5 * time.Second}, []any{shape, seq, naive, maxT})
	_, _, _, _, maxT = run(map[string]bool{"max-time": true})
	assert.Equal(t, 2*time.Second, maxT, "a flag given keeps its value")
	for _, f := range []string{"seq", "shape", "model", "config"} {
		q, shape, seq, _, _ := run(map[string]bool{f: true})
		assert.False(t, q, f)
		assert.Equal(t, "27b", shape, f)
		assert.Equal(t, "512,2048,8192", seq, f)
	}
	// Choosing what to time (--op, --backends, --plugin) keeps the sizes
	// quick: help's `bench --op decoder-layer --backends …` took 6 min 48 s.
	q, shape, seq, _, _ = run(map[string]bool{"op": true, "backends": true, "plugin": true})
	assert.True(t, q)
	assert.Equal(t, []any{"0.8b", "128,512"}, []any{shape, seq})
	code, stdout, _ := runHelp("bench")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, bench.QuickFallbackMix)
	assert.Contains(t, stdout, "under a minute")
}

// bench --model without --op runs llama-bench's pp and tg tests and prints
// its table, a row per test and backend; --op keeps the sweep.
func TestBenchModelSpeed(t *testing.T) {
	dir := "../../testdata/golden/hub-bf16-sharded"
	code, stdout, stderr := benchCLI("--model", dir, "--pp", "8", "--tg", "4", "--reps", "2", "--backends", "chunked,naive")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 6, stdout)
	assert.Equal(t, "| model                          |       size |     params | backend    | threads |            test |                  t/s |", lines[0])
	assert.Equal(t, "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |", lines[1])
	for i, want := range []string{"chunked | .* pp8 |", "chunked | .* tg4 |", "naive      | .* pp8 |", "naive      | .* tg4 |"} {
		assert.Regexp(t, `^\| qwen3_5 \S+ BF16 +\| +[0-9.]+ MiB \| +[0-9.]+ M \| `+want+` +[0-9.]+ ± [0-9.]+ \|$`, lines[2+i])
	}
	// llama-bench's own flags: -p, -n, -r and -o.
	code, stdout, stderr = benchCLI("--model", dir, "-p", "8", "-n", "0", "-r", "3", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var rs []bench.SpeedResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &rs))
	require.Len(t, rs, 1)
	assert.Equal(t, []int{8, 0}, []int{rs[0].NPrompt, rs[0].NGen})
	assert.Len(t, rs[0].SamplesTS, 3, "-r repetitions")
	assert.Contains(t, stdout, `"stddev_ts"`)
	for _, o := range []string{"csv", "jsonl"} {
		code, stdout, stderr = benchCLI("--model", dir, "-p", "0", "-n", "2", "-r", "1", "-o", o)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "build_commit", o)
	}
	code, _, stderr = benchCLI("--model", dir, "--seq", "8")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "add --op for the sweep")
}
