package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/verify"
	"github.com/qwenref/qwenref/weights"
)

func init() {
	register(&command{name: "trace", summary: "print every intermediate of a forward pass (find where a kernel diverges)", run: runTrace})
}

func runTrace(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("trace", "[--model DIR] --ids 1,2,3 [--layer N | --all] [--backend B] [--plugin NAME=LIB.so] [--compare FILE [--json] [--chained]] [--out FILE.safetensors]", `
`+verify.StagesHelp()+`

This is the tool for finding the first stage where a kernel goes wrong.
Write a trace with the trusted naive backend, then trace your backend with
--compare. Every layer is fed the reference's own input to it (teacher
forcing), so errors never pile up with depth, and every stage inside it is
compared; the core kernels (conv, delta, attention) and the projections
also run alone on the reference's recorded inputs to them ("isolated").
Each verdict prints its bar, which comes from an error model: float32
rounding over the stage's reduction length (never looser than the golden
tests' 1e-5 relative L2 and 1e-4 scaled max-abs), or bf16 rounding for a
bf16 backend (a spec containing bf16 or cuda; --precision overrides).
The first stage that fails is named and the exit status is 4; 0 means
every compared stage agrees; 1 means nothing was comparable (or an
error), 2 a usage error. --json prints the report as JSON (schema in
docs/tolerances.md). --chained instead compares one end-to-end run with
a single relative L2 bar (--tol), to see drift over depth.
--compare also reads transformers' golden files
(testdata/golden/*/expected.safetensors; row 0 of a batch), so the naive
backend itself can be checked against transformers stage by stage.

--out writes every stage of every layer (float32, shapes as printed) to a
safetensors file, for a later --compare or for numpy.

Examples:
  # where does my backend first differ from the naive one?
  qwenref trace --model testdata/golden/causal-f16-t130 --ids 5,17,42,7 --backend naive --out naive.safetensors
  qwenref trace --model testdata/golden/causal-f16-t130 --ids 5,17,42,7 --compare naive.safetensors

  # does the naive backend match transformers, stage by stage?
  qwenref trace --model testdata/golden/causal-f16-t130 --all --backend naive \
      --ids-json testdata/golden/causal-f16-t130/inputs.json \
      --compare testdata/golden/causal-f16-t130/expected.safetensors

  # one layer, in detail
  qwenref trace --model testdata/golden/causal-f16-t130 --ids 5,17,42 --layer 1 --values 8`, stderr)
	dir := addModelFlag(fs, demoModel)
	idf := addIDFlags(fs) // a golden's inputs.json too; row 0 is traced
	layer := fs.Int("layer", 0, "the layer to print")
	all := fs.Bool("all", false, "print every stage of every layer")
	nvals := fs.Int("values", 4, "how many leading values to print per stage")
	backend := addBackendFlag(fs)
	out := fs.String("out", "", "write every stage to this .safetensors file (atomically)")
	compare := fs.String("compare", "", "a trace or golden .safetensors to compare every stage with")
	tol := fs.Float64("tol", 1e-5, "--chained --compare: largest relative L2 error that counts as agreement")
	chained := fs.Bool("chained", false, "--compare one end-to-end run (drift over depth) instead of teacher-forcing every layer")
	jsonOut := fs.Bool("json", false, "--compare: print the report as JSON instead of text")
	precision := fs.String("precision", "auto", "--compare: the error model, f32 or bf16 (auto: the backend's own precision)")
	plugins := addPluginFlag(fs)
	mem := addMemoryFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error { return usageError(fs, stderr, format, a...) }
	switch {
	case *nvals < 0 || *nvals > maxTraceValues:
		return usageErr("--values must be 0 to %d, not %d", maxTraceValues, *nvals)
	case !(*tol >= 0 && *tol < math.Inf(1)):
		return usageErr("--tol must be a finite number ≥ 0, not %v", *tol)
	case *precision != "auto" && *precision != "f32" && *precision != "bf16":
		return usageErr("--precision must be auto, f32 or bf16, not %q", *precision)
	case (*jsonOut || *chained) && *compare == "":
		return usageErr("--json and --chained need --compare")
	case flagWasSet(fs, "tol") && !*chained:
		return usageErr("--tol is the bar of --chained; teacher-forced checks take theirs from the error model")
	case *chained && *jsonOut:
		return usageErr("--json reports the teacher-forced comparison; leave out --chained")
	}
	if (*idf.list == "") == (*idf.file == "") {
		return usageErr("give the token ids with exactly one of --ids or --ids-json")
	}
	rows, err := idf.read()
	if err != nil {
		return err
	}
	if len(rows) > 1 {
		fmt.Fprintf(stderr, "trace: %s holds %d sequences; tracing row 0\n", safeio.Clean(idf.name()), len(rows))
	}
	ids := rows[0]
	op, err := openFlags{dir: dir, backend: backend, plugins: plugins, mem: mem}.open(model.OpenOptions{IDs: [][]int{ids}, IDsName: "the ids",
		Check: func(op *model.Opened) error { return checkTrace(op.Model.Config, mem, len(ids)) }}, nil, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	m, be := op.Model, op.Backend
	if *layer < 0 || *layer >= len(m.Blocks) {
		return usageErr("--layer %d is outside the model's layers 0..%d", *layer, len(m.Blocks)-1)
	}
	var outOpts weights.WriteOptions
	if *out != "" {
		if outOpts, err = outputFor("--out", *out, append(append(op.Inputs(), *compare, *idf.file), plugins.paths()...)...); err != nil {
			return err
		}
	}

	var ref *weights.Store
	if *compare != "" {
		if ref, err = weights.Open(*compare); err != nil {
			return fmt.Errorf("--compare: %w", err)
		}
		defer ref.Close()
		if !*chained {
			if *out != "" {
				stages, err := verify.Trace(m, be, ids)
				if err == nil {
					err = verify.WriteTrace(*out, stages, m, be.Name, op.Dir, ids, outOpts)
				}
				if err != nil {
					return err
				}
			}
			bf16 := *precision == "bf16" || (*precision == "auto" && be.Precision == model.PrecisionBF16)
			return reportForced(stdout, m, be, ref, *compare, ids, bf16, *jsonOut, *all, *layer)
		}
		// A trace of other ids would "differ" at the embeddings: say why instead.
		if err := verify.CheckTraceIDs(*compare, ids); err != nil {
			return fmt.Errorf("--compare %s: %w", *compare, err)
		}
	}
	stages, err := verify.Trace(m, be, ids)
	if err != nil {
		return err
	}

	shown := fmt.Sprint(ids[:min(len(ids), 12)])
	if len(ids) > 12 {
		shown = shown[:len(shown)-1] + " …]"
	}
	fmt.Fprintf(stdout, "trace: %d tokens %s on %s; %d layers (%s)\n", len(ids), shown, be.Name, len(m.Blocks), verify.LayerKinds(m))
	prefix := fmt.Sprintf("layers.%d.", *layer)
	if !*all {
		fmt.Fprintf(stdout, "layer %d is %s\n", *layer, m.Blocks[*layer].Kind)
	}
	firstBad, compared := "", 0
	for _, s := range stages {
		cmp := ""
		if ref != nil {
			c := verify.CompareChained(ref, s, *tol)
			switch {
			case !c.InReference:
				cmp = "   (not in --compare file)"
			case c.Problem != "":
				cmp = "   compare: " + c.Problem
			case c.OK:
				cmp = fmt.Sprintf("   rel L2 %.2e ok", c.RelL2)
			default:
				cmp = fmt.Sprintf("   rel L2 %.2e DIFFERS", c.RelL2)
			}
			if c.InReference {
				compared++
			}
			if !c.OK && firstBad == "" {
				firstBad = s.Name
				cmp += "   ← first divergence"
			}
		}
		if *all || strings.HasPrefix(s.Name, prefix) || s.Name == firstBad {
			fmt.Fprintf(stdout, "%s%s\n", s.Describe(*nvals), cmp)
		}
	}
	if *out != "" {
		if err := verify.WriteTrace(*out, stages, m, be.Name, op.Dir, ids, outOpts); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d stages to %s\n", len(stages), safeio.Clean(*out))
	}
	if ref != nil {
		if compared == 0 {
			return fmt.Errorf("--compare %s holds none of the %d stages traced: nothing was compared (is it a trace or golden of this model?)", *compare, len(stages))
		}
		if firstBad != "" {
			fmt.Fprintf(stdout, "stage %s is the first to differ from %s by more than relative L2 %g (chained: errors include every earlier layer's)\n", firstBad, safeio.Clean(*compare), *tol)
			return exitStatus(4)
		}
		fmt.Fprintf(stdout, "all compared stages agree with %s within relative L2 %g (%d of %d stages compared)\n", *compare, *tol, compared, len(stages))
	}
	return nil
}
