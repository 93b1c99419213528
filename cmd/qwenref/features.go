package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/features"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tokenizer"
)

func init() {
	register(&command{name: "features", summary: "capture chosen layers' hidden states of a data set for drafter training (DFlash, EAGLE-3); 'features check DIR' checks a set", run: runFeatures})
}

func runFeatures(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "check" {
		return runFeaturesCheck(args[1:], stdout, stderr)
	}
	fs := newFlags("features", "--model DIR --data FILE.jsonl --out DIR [--layers dflash|eagle3|speculators|last|1,16,final_norm] [--dtype bf16|f32] [--format qwenref|speculators] [--max-len N] [--pack-tokens N] [--on-error fail|skip] [--rank R --world-size N] [--validate N]", `
Runs every sample of a JSONL data set through the model and writes the
hidden states of the chosen layers, the token ids and the loss mask:
the training data of a DFlash or EAGLE-3 drafter (docs/features.md).

A line is {"ids": [...]} (with an optional "loss_mask"), {"text": "..."}
(all trained on), or {"messages": [...], "tools": [...]}, rendered with
the checkpoint's chat template as 'qwenref prompt --no-generation-prompt'
renders it, with SpecForge's loss mask over the assistant's tokens.

Layer i is the output of decoder layer i counted from 0, before the final
norm (transformers' output_hidden_states[i+1], vLLM's boundary i+1);
final is layer L-1's output, final_norm the final norm's (post-norm).
Presets: dflash (5 layers from 1 to L-3; dflash:K for K), eagle3 ([1,
L/2-1, L-4] and final_norm), speculators ([1, L/2-1, L-4, L-2]), last
(final_norm).

The run writes shards through a temporary file and a rename and the
manifest after each, so running the same command again resumes an
interrupted run where it stopped. --validate N recomputes N samples on
--validate-backend afterwards and prints each layer's relative L2.

Examples:
  qwenref features --model Qwen/Qwen3.6-27B --data chats.jsonl --out feats --layers dflash
  qwenref features --model DIR --data chats.jsonl --out feats/rank3 --rank 3 --world-size 8 --gpu 3 --backend cuda
  qwenref features check feats --model DIR`, stderr)
	dir := addModelFlag(fs, demoModel)
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	data := fs.String("data", "", "the data set: JSONL, one sample a line")
	out := fs.String("out", "", "output directory (resumed when it holds this run's manifest)")
	layers := fs.String("layers", "dflash", "a preset (dflash, dflash:K, eagle3, speculators, last) or layers 0..L-1, final, final_norm, comma-separated")
	dtype := fs.String("dtype", "bf16", "stored dtype: bf16 or f32")
	format := fs.String("format", features.FormatShards, "qwenref (shards) or speculators (hidden_states/hs_N.safetensors, one per sample)")
	maxLen := fs.Int("max-len", 0, "cut samples to this many tokens (0: no limit); the manifest counts the cuts")
	pack := fs.Int("pack-tokens", 0, "pack consecutive samples of up to N tokens in all into one forward (0: off; CPU backends; same output)")
	onError := fs.String("on-error", "fail", "a bad line: fail (before any compute) or skip (listed in the manifest)")
	rank := fs.Int("rank", 0, "this process's share: samples i with i mod --world-size = --rank")
	world := fs.Int("world-size", 1, "number of processes sharing the data set")
	shardMB := fs.Int("shard-mb", 1024, "features per shard, MiB (a shard is held in memory until written)")
	validate := fs.Int("validate", 0, "recompute this many samples afterwards and print each layer's relative L2")
	valBackend := fs.String("validate-backend", "naive", "the reference backend of --validate")
	tokPath := fs.String("tokenizer", "", "tokenizer.json instead of the checkpoint's")
	tplFile := fs.String("chat-template-file", "", "chat template instead of the checkpoint's")
	mem := addMemoryFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *data == "" || *out == "" {
		return usageError(fs, stderr, "give --data FILE.jsonl and --out DIR")
	}
	if *shardMB < 1 || *maxLen < 0 || *world < 1 || *validate < 0 || *pack < 0 {
		return usageError(fs, stderr, "want --shard-mb ≥ 1, --max-len ≥ 0, --world-size ≥ 1, --validate ≥ 0 and --pack-tokens ≥ 0")
	}
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	var demo *tokenizer.Tokenizer
	op, err := openFlags{dir: dir, backend: backend, plugins: plugins, mem: mem}.open(model.OpenOptions{BoundHeap: true}, &demo, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	taps, err := features.ResolveLayers(*layers, op.Model.Config.NumLayers)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	prep, err := preparer(op, *tokPath, *tplFile, demo, *maxLen, stderr)
	if err != nil {
		return err
	}
	r, err := model.NewRunner(op.Model, op.Backend, 1)
	if err != nil {
		return err
	}
	defer r.Close()
	man, err := features.Run(features.Options{Model: op.Model, Runner: r, Backend: op.Backend.Name, Precision: string(op.Backend.Precision), ModelDir: op.Dir,
		Data: *data, Out: *out, Layers: taps, DType: strings.ToUpper(*dtype), Format: *format, Prep: prep,
		OnError: *onError, Rank: *rank, World: *world, Shard: int64(*shardMB) << 20, Progress: stderr, PackTokens: *pack, CheckMemory: op.CheckBytes})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "features: %d samples, %d tokens, %d shards in %s (%d cut by --max-len, %d lines skipped)\n",
		man.SamplesDone, man.TokensDone, len(man.Shards), *out, man.Truncated, len(man.Skipped))
	if *validate == 0 {
		return nil
	}
	return checkSet(op.Model, *valBackend, features.CheckOptions{Dir: *out, Records: *validate, Prep: prep, Data: *data}, stdout)
}

// preparer loads what turns lines into tokens: the tokenizer and, when the
// checkpoint has one, its chat template.
func preparer(op *model.Opened, tokPath, tplFile string, demo *tokenizer.Tokenizer, maxLen int, stderr io.Writer) (*features.Preparer, error) {
	p := &features.Preparer{MaxLen: maxLen, Vocab: op.Model.Config.VocabSize}
	var err error
	switch {
	case op.Dir != "":
		p.Tokenizer, err = features.LoadTokenizer(op.Dir, tokPath, p.Vocab, bundled.Tokenizer, stderr)
	case demo != nil:
		p.Tokenizer = demo
	default:
		p.Tokenizer, err = bundled.Tokenizer()
	}
	if err != nil {
		return nil, err
	}
	if op.Dir != "" || tplFile != "" {
		p.Template, err = features.LoadTemplate(op.Dir, tplFile)
		if err != nil && (tplFile != "" || !isNoTemplate(err)) {
			return nil, err
		}
	}
	return p, nil
}

func isNoTemplate(err error) bool { return errors.Is(err, chat.ErrNoTemplate) }

func runFeaturesCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("features check", "DIR [--model M] [--backend B] [--records N] [--layers L] [--data FILE.jsonl] [--bar X]", `
Reads a features directory (qwenref's shards, or a speculators directory
of hidden_states/hs_N.safetensors another engine wrote), recomputes a
sample of its records on --backend and reports per layer the relative L2
against the recomputation, then one line per finding: an all-zero, NaN or
Inf plane, values at fp16's limit (65504), a plane that matches another
layer better than its own, ids that do not belong to their line of
--data. Exit status: 0 all holds, 4 a finding, 1 an error, 2 a usage
error.

A directory without qwenref's manifest needs --layers: the layers its
planes hold, in order (speculators' default: --layers speculators).

Examples:
  qwenref features check feats --model DIR
  qwenref features check vllm-out --model DIR --layers speculators --records 32`, stderr)
	dir := addModelFlag(fs, demoModel)
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	records := fs.Int("records", 8, "records to recompute, spread over the set")
	layers := fs.String("layers", "", "the stored planes' layers, for a directory without a manifest")
	data := fs.String("data", "", "the JSONL the set was made from, to check that ids belong to their lines")
	bar := fs.Float64("bar", 0, "largest relative L2 that agrees (0: 0.02 for bf16 sets, 1e-3 for f32)")
	set, err := parseWithPositional(fs, args)
	if err != nil {
		return err
	}
	if set == "" {
		return usageError(fs, stderr, "give the directory: qwenref features check DIR")
	}
	if *records < 1 || *bar < 0 {
		return usageError(fs, stderr, "want --records ≥ 1 and --bar ≥ 0")
	}
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	var demo *tokenizer.Tokenizer
	op, err := openFlags{dir: dir, plugins: plugins}.open(model.OpenOptions{}, &demo, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	o := features.CheckOptions{Dir: set, Records: *records, Bar: *bar, Data: *data}
	if *layers != "" {
		if o.Layers, err = features.ResolveLayers(*layers, op.Model.Config.NumLayers); err != nil {
			return usageError(fs, stderr, "%v", err)
		}
	}
	if *data != "" {
		if o.Prep, err = preparer(op, "", "", demo, 0, stderr); err != nil {
			return err
		}
	}
	return checkSet(op.Model, *backend, o, stdout)
}

// checkSet runs features.Check on backend and prints its report: exit 4
// on a finding.
func checkSet(m *model.Model, backend string, o features.CheckOptions, stdout io.Writer) error {
	be, err := model.ParseBackend(backend)
	if err != nil {
		return err
	}
	defer be.Close()
	r, err := model.NewRunner(m, be, 1)
	if err != nil {
		return err
	}
	defer r.Close()
	o.Model, o.Runner = m, r
	rep, err := features.Check(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "features check: %d records recomputed on %s\n", rep.Records, be.Name)
	for _, l := range rep.Layers {
		fmt.Fprintf(stdout, "  layer %-10s (%s)  relative L2 max %.2e\n", l.Tap.Name, l.Tap.Stage, l.MaxRel)
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(stdout, f)
	}
	if len(rep.Findings) > 0 {
		return exitStatus(4)
	}
	fmt.Fprintln(stdout, "all holds")
	return nil
}
