package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/weights"
)

func init() {
	register(&command{name: "forward", summary: "run a forward pass on token ids and write logits to safetensors", run: runForward})
}

func runForward(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("forward", "--model DIR (--ids-json FILE | --ids 1,2,3) --out FILE.safetensors [--backend B]", `
Runs one forward pass of a Qwen3.5/3.6 checkpoint over token ids and writes
the float32 logits [B,T,V] (tensor "logits") and the final-norm hidden
states [B,T,H] (tensor "hidden") to a safetensors file.

The checkpoint directory holds config.json and model.safetensors, or shards
with model.safetensors.index.json, in the hub layout
(Qwen3_5ForConditionalGeneration) or the flat one (Qwen3_5ForCausalLM).
The ids file is a JSON array of equal-length arrays, e.g. [[9707, 11, 1879]];
--ids 1,2,3 gives one row on the command line; "-" reads either from stdin.

On any error nothing is written and the exit status is non-zero.

Example:
  qwenref forward --model testdata/golden/hub-bf16-sharded \
      --ids-json ids.json --backend chunked --out logits.safetensors`, stderr)
	dir := addModelFlag(fs, "")
	ids := addIDFlags(fs)
	out := fs.String("out", "", "output .safetensors file (written atomically)")
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	mem := addMemoryFlag(fs)
	checkW := addCheckWeightsFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, f := range []struct{ name, val string }{{"--model", *dir}, {"--out", *out}} {
		if f.val == "" {
			return usageError(fs, stderr, "missing %s", f.name)
		}
	}
	if err := resolveModelFlag(dir, stderr); err != nil { // before reading ids: a bad --model says so first
		return err
	}
	batch, err := ids.read()
	if errors.Is(err, errNoIDs) {
		return usageError(fs, stderr, "missing --ids-json (or --ids)")
	}
	if err != nil {
		return err
	}
	bsz, t := len(batch), len(batch[0])
	var outOpts weights.WriteOptions
	op, err := openFlags{dir, backend, plugins, mem, checkW}.open(model.OpenOptions{IDs: batch, IDsName: ids.name(),
		Run: &model.RunSize{Rows: bsz, Tokens: t, LogitRows: bsz * t, What: "ids", Recorded: true}, BoundHeap: true,
		Check: func(op *model.Opened) (err error) {
			outOpts, err = outputFor("--out", *out, append(append(op.Inputs(), *ids.file), plugins.paths()...)...)
			return err
		}}, nil, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	cfg, be := op.Model.Config, op.Backend
	start := time.Now()
	logits, hidden, err := model.ForwardHidden(op.Model, be, batch)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	err = weights.WriteFile(*out, []weights.NamedTensor{
		{Name: "logits", DType: "F32", Shape: []int{bsz, t, cfg.VocabSize}, Data: logits},
		{Name: "hidden", DType: "F32", Shape: []int{bsz, t, cfg.HiddenSize}, Data: hidden},
	}, map[string]string{"backend": be.Name, "model": op.Dir, "producer": "qwenref forward"}, outOpts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "forward: %d×%d tokens on %s in %v (%.1f tok/s) → %s\n",
		bsz, t, be.Name, elapsed.Round(time.Millisecond), float64(bsz*t)/elapsed.Seconds(), safeio.Clean(*out))
	return nil
}
