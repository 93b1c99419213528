package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/qwenref/qwenref/bench"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "bench", summary: "time backends op by op and for the whole model: the fallback penalty", run: runBench})
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "[--op OPS] [--seq 512,2048,8192] [--backends naive,chunked] [--shape 27b | --model DIR | --config FILE] [--format F] [--out DIR]", `
Times every backend on each op and sequence length T with the same inputs,
and reports the median (min – max) time, GFLOP/s (GB/s for the memory-bound
conv) against the machine's ceiling, the fallback penalty (time over the
fastest backend's) and each output's difference from the naive backend's.

Ops (--op, comma-separated): `+strings.Join(bench.OpNames(), ", ")+`;
"layers" is every op but model (the default), "all" every op.
  conv             causal depthwise conv + SiLU of one GDN layer
  gdn-core         the gated delta rule alone (the fused kernel's job)
  gdn-layer        one GDN token mixer (projections, conv, core, norm)
  attention-layer  one gated attention token mixer (prefill, empty cache)
  mlp              one SwiGLU MLP
  decoder-layer    norm + GDN mixer + residual + norm + MLP + residual
  decoder-layer-attn  the same with the attention mixer
  model            the whole forward (prefill; last token's logits)

Weights are random (deterministic from --seed) and made in memory, so no
checkpoint is needed; layer ops build only one layer of each kind they
run. The whole 27B model does not fit in memory: op model at --shape 27b
is refused unless --layers N cuts it (e.g. --layers 4: three GDN layers
and one attention layer) or --model DIR runs a checkpoint from disk (mmap).
When every backend listed generates weights itself (--backends cuda), ops
model and decode build none in memory: the GPU generates them from --seed
(the records' note says so, and there is no naive reference), so
  qwenref bench --backends cuda --op model --shape 27b --seq 8192
runs all 64 layers. With cuda, ops conv, gdn-core and gdn-layer at the 27B
widths, and attention-layer at any released shape's widths, are timed on
the device (CUDA events, inputs resident there); their deltas come from
the same op called with host copies.

Batch rows (--batch 1,8,32): ops model and decode run a runner of B rows,
each row its own sequence with its own caches and states: op model
prefills T tokens in every row, op decode steps every row one token at
position T. The T column reads T×B, GFLOP counts every row, and the note
gives tokens/s and, when B = 1 is in the list, the speedup over one row.
On cuda a decode step runs all rows at once (GEMMs over the rows, the
decode kernels over rows × heads, one CUDA graph), a prefill row after row.

Method: --warmup untimed runs, then at least --reps timed runs and at
least --min-time in all; repetition stops once --max-time is spent, and a
warm-up run longer than --max-time is the single (cold) sample. The
backends of a case take turns run by run, so a change in the machine's
load hits them alike; times are medians because the machine may be shared.

Backends (--backends) are registered names or mixes: BASE:PART=OTHER...
with PART one of matmul, conv, delta, attn, moe swaps those kernels, e.g.
"chunked:delta=naive:conv=naive" is chunked with the unfused GDN core and
conv (what transformers does without flash-linear-attention: fast GEMMs,
slow GDN), while "naive" loses every fast kernel.

Naive is the reference: it runs (timed if listed in --backends, else once
untimed) only where a call's work is at most --naive-max-gflop, since its
plain loops reach about 1 GFLOP/s; elsewhere its row and every difference
are "–" (null in JSON) with the reason.

FLOP counts (anchors' conventions): projections 2·in·out per token; GDN
core 7·d_k·d_v per value-head-token (recurrent count); conv 2·K·C per
token; attention 4·T·S·d_h·heads/2, causal. Ceilings: CPU ≈ 200 GFLOP/s fp32
(OpenBLAS on the project's 2 vCPUs; a good GEMM beats it), H200 694
TFLOP/s bf16.

With --model DIR and no --op it runs llama-bench's tests on that model:
pp512 (a prefill of 512 tokens) and tg128 (128 tokens decoded one at a
time from empty caches; -p/--pp and -n/--tg change the counts), -r/--reps
times each after --warmup untimed runs, and prints llama-bench's table:
model, size, params, backend, threads, test, and t/s as mean ± standard
deviation; -o csv, json or jsonl writes llama-bench's fields instead.

With none of --seq, --shape, --model and --config the sweep is a quick
one (under a minute on two cores for the layer ops): the 0.8b shape at
T = 128 and 512, on every backend plus chunked:delta=naive:conv=naive
(transformers' path without the fused GDN kernels) unless --backends
names them, naive only for calls of at most 1 GFLOP, each case stopped
after 5 s. Any of those flags gives the full defaults: T = 512, 2048, 8192, naive up to 30 GFLOP, up to a
minute a case; the shape stays 0.8b unless --shape names another (--shape
27b alone: about ten minutes for the 27B layer ops on two cores). A sweep
estimated at over a minute says so before it starts.

Output (--format): table (the default), md (Markdown tables), csv, json (a
list of objects; --json is the same) or jsonl (an object per line). Every
record has op, backend, seq, median_ms, min_ms, max_ms, cpu_ms, gflops,
penalty, rel_l2_vs_naive and the run's commit, build (default or
GOEXPERIMENT), kernel level, CPU model, GOMAXPROCS and load average (after
that op and T), so files from different machines compare. --out DIR also writes results.csv, results.json and report.txt
(after every op and T, atomically) and time-<op> and penalty-<op> charts
as SVG and PNG (ticks at the measured T, min–max whiskers, a dot plot of
the penalty, the Okabe–Ito palette, a caption naming shape, build and
machine). Progress goes to stderr.

Examples:
  qwenref bench                             # the quick default sweep
  qwenref bench --model DIR -p 512 -n 128 -r 5 -o json  # as llama-bench
  qwenref bench --shape 27b --out bench-27b # the full 27B layer sweep, with charts
  qwenref bench --op gdn-core --seq 512,2048,8192,32768 --backends naive,chunked
  qwenref bench --op layers --seq 512,2048 --out bench-out
  qwenref bench --op decoder-layer --backends chunked,chunked:delta=naive:conv=naive
  qwenref bench --op model --shape 0.8b --seq 512,2048 --json
  qwenref bench --backends cuda --op decode --shape 27b --seq 2048 --batch 1,8,32
  qwenref bench --op model --shape 27b --layers 4 --vocab 4096 --seq 512`, stderr)
	opList := fs.String("op", "layers", "ops to run, comma-separated (see above)")
	seqList := fs.String("seq", "512,2048,8192", "sequence lengths T, comma-separated (k = ×1024; the quick sweep: 128,512)")
	beList := fs.String("backends", "", fmt.Sprintf("backends or mixes (see above), comma-separated; empty = all registered: %s", strings.Join(model.BackendNames(), ",")))
	shape := fs.String("shape", "0.8b", fmt.Sprintf("named shape: %s", strings.Join(model.ShapeNames(), ", ")))
	dir := addModelFlag(fs, ": run its weights (mmap'ed) instead of random ones")
	cfgPath := fs.String("config", "", "config.json to take the shape from (random weights)")
	layers := fs.Int("layers", 0, "op model: keep only the first N decoder layers (0 = all)")
	batchList := fs.String("batch", "1", "ops model and decode: batch rows B, comma-separated (each row its own sequence and caches)")
	states := fs.Int("states", 1, "op decode-core: cycle through this many layers' states, so each is cold when it comes round (48: the 27B's GDN layers)")
	vocab := fs.Int("vocab", 0, "op model: vocabulary size override (0 = the shape's)")
	dtype := fs.String("dtype", "bf16", "random weights' type in memory: bf16 or f32")
	seed := fs.Uint64("seed", 1, "seed of the random weights and inputs")
	warmup := fs.Int("warmup", 1, "untimed warm-up runs per case")
	reps := fs.Int("reps", 5, "timed runs per case, at least")
	minTime := fs.Duration("min-time", 200*time.Millisecond, "keep repeating a case until its timed runs add up to this")
	maxTime := fs.Duration("max-time", time.Minute, "stop repeating a case once its timed runs add up to this (the quick sweep: 5s)")
	naiveMax := fs.Float64("naive-max-gflop", 30, "run naive (timing and reference) only for calls of at most this many GFLOP (the quick sweep: 1)")
	maxMem := &memoryFlag{fallback: func() (float64, string) { return bench.DefaultMaxMemoryGiB(), "75% of RAM" }}
	fs.Var(maxMem, "max-memory", "`GiB` of random weights the bench may build (default: 75% of RAM)")
	fs.Var(maxMem, "max-mem", "deprecated spelling of --max-memory")
	ceiling := fs.Float64("ceiling-gflops", bench.CPUCeilingGFLOPS, "this CPU's fp32 ceiling for the %ceil column")
	format := fs.String("format", "table", "output on stdout: "+strings.Join(bench.Formats, ", "))
	asJSON := fs.Bool("json", false, "the same as --format json")
	outDir := fs.String("out", "", "directory for results.csv/.json, report.txt and SVG/PNG charts")
	pp, tg := addSpeedFlags(fs, reps, format)
	plugins := addPluginFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := loadPlugins(plugins); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { set[f.Name] = flagWasSet(fs, f.Name) })
	quick := bench.QuickSweep(set, shape, seqList, naiveMax, maxTime)
	if *asJSON {
		if set["format"] && *format != "json" {
			return usageError(fs, stderr, "--json and --format %s disagree", *format)
		}
		*format = "json"
	}
	if !slices.Contains(bench.Formats, *format) {
		return usageError(fs, stderr, "--format %q: want one of %s", *format, strings.Join(bench.Formats, ", "))
	}
	bad := func(format string, a ...any) error { return usageError(fs, stderr, format, a...) }
	if *reps > bench.MaxRuns || *warmup > bench.MaxRuns {
		return bad("--reps and --warmup are at most %d", bench.MaxRuns)
	}
	if set["model"] && !set["op"] {
		return benchSpeed(fs, bench.SpeedOptions{Prompt: *pp, Gen: *tg, Reps: *reps, Warmup: *warmup, Seed: *seed, Progress: stderr, Filename: *dir},
			*dir, *beList, *format, maxMem, stdout, stderr)
	}

	if *states < 1 || *states > 4096 {
		return bad("--states must be in [1, 4096], not %d", *states)
	}
	opts := bench.Options{Seed: *seed, NaiveMaxGFLOP: *naiveMax, Layers: *layers, Vocab: *vocab, States: *states,
		Method:   bench.Method{Warmup: *warmup, Reps: *reps, MinTime: *minTime, MaxTime: *maxTime},
		Progress: stderr, TTY: isTerminal(stderr)}
	opts.MaxMemBytes, _ = maxMem.limit()
	var err error
	if opts.Ops, err = bench.ParseOps(*opList); err != nil {
		return bad("--op %q: %v", *opList, err)
	}
	if opts.Seqs, err = bench.ParseSeqs(*seqList); err != nil {
		return bad("--seq %q: %v", *seqList, err)
	}
	if set["batch"] {
		if opts.Batches, err = bench.ParseBatches(*batchList); err != nil {
			return bad("--batch %q: %v", *batchList, err)
		}
	}
	registered := model.BackendNames()
	if strings.TrimSpace(*beList) == "" {
		registered = bench.AvailableBackends(registered, stderr)
		if quick && slices.Contains(registered, "chunked") {
			*beList = strings.Join(append(slices.Clone(registered), bench.QuickFallbackMix), ",")
		}
	}
	if opts.Backends, err = bench.ParseBackends(*beList, registered); err != nil {
		return bad("--backends %q: %v", *beList, err)
	}
	switch {
	case *reps < 1:
		return bad("--reps %d: need at least one timed run", *reps)
	case *warmup < 0:
		return bad("--warmup %d: must not be negative", *warmup)
	case *minTime < 0 || *maxTime < 0:
		return bad("--min-time and --max-time must not be negative")
	case !(*naiveMax >= 0): // NaN too: it would skip naive everywhere
		return bad("--naive-max-gflop %g: must not be negative", *naiveMax)
	case *layers < 0 || *vocab < 0 || *vocab > model.MaxDim: // the weights' sizes are products of the vocabulary
		return bad("--layers must not be negative, and --vocab must be 0 to %d", model.MaxDim)
	case !(*ceiling > 0) || math.IsInf(*ceiling, 0):
		return bad("--ceiling-gflops %g: must be a positive number", *ceiling)
	}
	switch *dtype {
	case "bf16", "f32":
		opts.BF16 = *dtype == "bf16"
	default:
		return bad("--dtype %q: want bf16 or f32", *dtype)
	}
	if set["shape"] && set["model"] || set["shape"] && set["config"] || set["model"] && set["config"] {
		return bad("give one of --shape, --model and --config")
	}

	meta := bench.Meta{DType: *dtype, Seed: *seed, Method: opts.Method, Naive: *naiveMax,
		Machine: bench.Machine(), CPUCeiling: *ceiling, Command: strings.TrimSpace("qwenref bench " + bench.ShellJoin(args)), Date: time.Now(),
		Env: bench.CurrentEnv(), Loads: map[string][3]float64{}}
	switch {
	case *dir != "":
		if set["layers"] || set["vocab"] || set["dtype"] {
			return bad("--layers, --vocab and --dtype apply to random weights, not to --model")
		}
		// The weights are paged in before timing, or streamed layer by layer
		// when they outgrow RAM (then op model measures the disk, not kernels).
		o := model.OpenOptions{}
		if len(opts.Seqs) > 0 {
			t := slices.Max(opts.Seqs)
			o.Run = &model.RunSize{Rows: 1, Tokens: t, LogitRows: t, What: "--seq"}
		}
		op, err := openFlags{dir: dir, mem: maxMem}.open(o, nil, stderr, stderr)
		if err != nil {
			return err
		}
		defer op.Close()
		opts.Checkpoint, opts.Config, opts.ShapeName = op.Model, op.Model.Config, op.Dir
		meta.DType = "checkpoint"
	case *cfgPath != "":
		if opts.Config, err = model.LoadConfig(*cfgPath); err != nil {
			return bad("--config %q: %v", *cfgPath, err)
		}
		opts.ShapeName = *cfgPath
	default:
		if opts.Config, err = model.ShapeConfig(*shape); err != nil {
			return bad("--shape: %v", err)
		}
		opts.ShapeName = strings.ToLower(*shape)
	}
	if *layers > opts.Config.NumLayers {
		return bad("--layers %d: shape %s has %d layers", *layers, opts.ShapeName, opts.Config.NumLayers)
	}
	meta.Shape, meta.Config = opts.ShapeName, opts.Config
	meta.CPUCopyGBPS = bench.CopyGBPSFor(opts.Ops)
	if *outDir != "" {
		if err := bench.PrepareDataDir(*outDir); err != nil { // before the sweep, not after its first group
			return fmt.Errorf("--out: %w", err)
		}
	}
	// After each (op, T) group: note the load average, then save the files.
	opts.OnGroup = func(rs []bench.Result) error {
		if l, ok := bench.LoadAvg(); ok && len(rs) > 0 {
			last := rs[len(rs)-1]
			meta.Loads[bench.LoadKey(last.Op, last.Seq)] = l
		}
		if *outDir == "" {
			return nil
		}
		return bench.WriteData(*outDir, meta, rs)
	}
	results, err := bench.Run(opts)
	if err != nil {
		return err
	}
	if err := bench.WriteFormat(stdout, *format, meta, results); err != nil {
		return err
	}
	if *outDir != "" {
		if err := bench.WriteData(*outDir, meta, results); err != nil {
			return err
		}
		files, err := bench.WritePlots(*outDir, meta, results)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote results.csv, results.json, report.txt and %d charts to %s\n", len(files), safeio.Clean(*outDir))
	}
	return nil
}
