package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
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
	dir := fs.String("model", "", "checkpoint directory (config.json + safetensors)")
	idsPath := fs.String("ids-json", "", "JSON file with token ids: [[id, ...], ...] (- reads stdin)")
	idsList := fs.String("ids", "", "token ids of one row, comma-separated or a JSON array (- reads stdin)")
	out := fs.String("out", "", "output .safetensors file (written atomically)")
	backend := fs.String("backend", defaultBackend(), fmt.Sprintf("kernels to run on: %v", model.BackendNames()))
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
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	batch, err := readIDs(*idsList, *idsPath)
	if errors.Is(err, errNoIDs) {
		return usageError(fs, stderr, "missing --ids-json (or --ids)")
	}
	if err != nil {
		return err
	}
	if _, err := outputFor("--out", *out, append(modelInputs(*dir, nil), *idsPath)...); err != nil {
		return err
	}
	if err := loadPlugins(plugins); err != nil {
		return err
	}
	be, err := model.NewBackend(*backend)
	if err != nil {
		return err
	}
	defer be.Close()
	m, err := model.Load(*dir)
	if err != nil {
		return err
	}
	defer m.Close()
	for _, w := range m.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	for b, ids := range batch {
		if err := m.CheckIDs(ids); err != nil {
			return fmt.Errorf("ids row %d: %w", b, err)
		}
	}
	outOpts, err := outputFor("--out", *out, append(modelInputs(*dir, m), *idsPath)...)
	if err != nil {
		return err
	}
	if err := checkRun(m.Config, mem, len(batch), len(batch[0]), len(batch)*len(batch[0]), "ids"); err != nil {
		return err
	}
	if *checkW {
		if err := checkWeights(m, stderr); err != nil {
			return err
		}
	}

	cfg := m.Config
	bsz, t := len(batch), len(batch[0])
	logits := make([]float32, 0, bsz*t*cfg.VocabSize)
	hidden := make([]float32, 0, bsz*t*cfg.HiddenSize)
	start := time.Now()
	// One single-row runner, reset per row: the recorder that captures the
	// final-norm hidden states takes one row at a time. On a device-resident
	// backend recording copies every stage off the device, so the pass is
	// slower there than an untraced one.
	runner, err := model.NewRunner(m, be, 1)
	if err != nil {
		return err
	}
	defer runner.Close()
	for b, ids := range batch {
		var h []float32
		rec := func(stage string, x *tensor.Tensor) {
			if stage == "final_norm" {
				h = append([]float32(nil), x.Data...)
			}
		}
		if b > 0 {
			if err := runner.Reset(); err != nil {
				return err
			}
		}
		lg, err := runner.Forward([][]int{ids}, model.RunOptions{Logits: model.AllLogits, Record: rec})
		if err != nil {
			if bsz > 1 {
				err = fmt.Errorf("ids row %d: %w", b, err)
			}
			return err
		}
		if len(h) != t*cfg.HiddenSize {
			return fmt.Errorf("ids row %d: backend %s recorded no final-norm hidden states (%d values, want %d)", b, be.Name, len(h), t*cfg.HiddenSize)
		}
		logits = append(logits, lg.Data...)
		hidden = append(hidden, h...)
	}
	elapsed := time.Since(start)
	err = weights.WriteFile(*out, []weights.NamedTensor{
		{Name: "logits", DType: "F32", Shape: []int{bsz, t, cfg.VocabSize}, Data: logits},
		{Name: "hidden", DType: "F32", Shape: []int{bsz, t, cfg.HiddenSize}, Data: hidden},
	}, map[string]string{"backend": be.Name, "model": *dir, "producer": "qwenref forward"}, outOpts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "forward: %d×%d tokens on %s in %v (%.1f tok/s) → %s\n",
		bsz, t, be.Name, elapsed.Round(time.Millisecond), float64(bsz*t)/elapsed.Seconds(), *out)
	return nil
}
