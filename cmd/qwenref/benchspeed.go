package main

import (
	"flag"
	"io"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/bench"
	"github.com/qwenref/qwenref/model"
)

// benchSpeed is bench --model without --op: llama-bench's pp and tg tests
// on the checkpoint, on --backends (default: the default backend).
func benchSpeed(fs *flag.FlagSet, o bench.SpeedOptions, dir, backends, format string, mem *memoryFlag, stdout, stderr io.Writer) error {
	for _, f := range []string{"layers", "vocab", "dtype", "seq", "shape", "config", "states", "naive-max-gflop", "min-time", "max-time", "out"} {
		if flagWasSet(fs, f) {
			return usageError(fs, stderr, "--%s applies to the op sweep, not to --model's pp/tg tests (add --op for the sweep)", f)
		}
	}
	if !slices.Contains(bench.SpeedFormats, format) {
		return usageError(fs, stderr, "--format %s: the pp/tg tests print %s", format, strings.Join(bench.SpeedFormats, ", "))
	}
	if backends == "" {
		backends = defaultBackend()
	}
	var err error
	if o.Backends, err = bench.ParseBackends(backends, model.BackendNames()); err != nil {
		return usageError(fs, stderr, "--backends %q: %v", backends, err)
	}
	if o.Reps < 1 || o.Warmup < 0 || o.Prompt < 0 || o.Gen < 0 || o.Prompt+o.Gen == 0 {
		return usageError(fs, stderr, "want --reps ≥ 1, --warmup ≥ 0, and --pp or --tg positive")
	}
	op, err := openFlags{dir: &dir, mem: mem}.open(model.OpenOptions{
		Run: &model.RunSize{Rows: 1, Tokens: max(o.Prompt, o.Gen), LogitRows: 1, What: "--pp and --tg"}}, nil, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	rs, err := bench.ModelSpeed(op.Model, o)
	if err != nil {
		return err
	}
	return bench.WriteSpeed(stdout, format, rs)
}

// addSpeedFlags adds the pp/tg tests' counts and llama-bench's short
// spellings: -p, -n, -r (--reps) and -o (--format).
func addSpeedFlags(fs *flag.FlagSet, reps *int, format *string) (pp, tg *int) {
	pp = fs.Int("pp", 512, "--model without --op: the prompt-processing test's tokens (0 = none)")
	tg = fs.Int("tg", 128, "--model without --op: the text-generation test's tokens (0 = none)")
	fs.IntVar(pp, "p", 512, "the same as --pp (llama-bench's spelling)")
	fs.IntVar(tg, "n", 128, "the same as --tg (llama-bench's spelling)")
	fs.IntVar(reps, "r", *reps, "the same as --reps (llama-bench's spelling)")
	fs.StringVar(format, "o", *format, "the same as --format (llama-bench's spelling)")
	return pp, tg
}
