package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/qwenref/qwenref/bench"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tokenizer"
)

func init() {
	register(&command{name: "perplexity", summary: "token-level NLL and perplexity of a text or ids, on one or several backends", run: runPerplexity})
}

func runPerplexity(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("perplexity", "[--model DIR] (--text-file F | --ids-json F | --ids 1,2,3) [--ctx N] [--stride S] [--backends B1,B2] [--json]", `
Scores a text (or token ids) with the model: the negative log-likelihood of
every token given the ones before it, its mean over the scored tokens
(nats), and the perplexity exp(mean NLL).

The output is llama-perplexity's: the perplexity so far after each window
([1]12.3456,[2]11.0543,…) and "Final estimate: PPL = x +/- y", the
standard error computed as llama.cpp does (of the mean NLL, through exp);
--json gives the same numbers (perplexity_stderr, mean_nll_stderr).

A sequence longer than --ctx is scored in windows of --ctx tokens whose
starts advance by --stride, as transformers' perplexity guide does: each
window is a fresh forward pass and scores only the tokens not scored by an
earlier window, so every token is scored once, with up to ctx − stride
tokens of context carried over (stride = ctx: no overlap, and each
window's first token goes unscored). With ids of several rows, the rows
are scored apart and pooled.

--backends runs the same windows on several backends and prints each one's
difference from the first: the model-level cost of a bf16 or fallback
kernel, in nats per token.

Examples:
  qwenref perplexity --model DIR --text-file wiki.test.txt --ctx 512 --stride 256
  qwenref perplexity --model DIR --text-file - --backends chunked,naive < text.txt
  qwenref perplexity --model testdata/golden/causal-f16-t130 --ids-json ids.json --json`, stderr)
	dir := addModelFlag(fs, demoModel)
	tokPath := fs.String("tokenizer", "", "tokenizer.json for --text-file instead of DIR/tokenizer.json")
	textFile := fs.String("text-file", "", "text to score (- reads stdin); encoded without special tokens")
	idf := addIDFlags(fs)
	cf := addChatFlags(fs, true)
	ctx := fs.Int("ctx", 512, "window length in tokens")
	stride := fs.Int("stride", 0, "window start advance in tokens, 1..ctx (0 = ctx/2)")
	backends := fs.String("backends", defaultBackend(), fmt.Sprintf("comma-separated backends to compare; the first is the reference (%v)", model.BackendNames()))
	asJSON := fs.Bool("json", false, "print the results as JSON (and nothing else on stdout)")
	mem := addMemoryFlag(fs)
	plugins := addPluginFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *stride == 0 {
		*stride = max(*ctx/2, 1)
	}
	if *ctx < 2 || *stride < 1 || *stride > *ctx {
		return usageError(fs, stderr, "want --ctx ≥ 2 and 1 ≤ --stride ≤ --ctx, got ctx %d, stride %d", *ctx, *stride)
	}
	nIn := 0
	for _, v := range []string{*textFile, *idf.file, *idf.list, cf.messages()} {
		if v != "" {
			nIn++
		}
	}
	if nIn != 1 && !(nIn == 2 && *textFile != "" && cf.messages() != "") {
		return usageError(fs, stderr, "give exactly one of --text-file, --ids-json, --ids and --messages")
	}
	if cf.enabled(fs) && *textFile == "" && cf.messages() == "" {
		return usageError(fs, stderr, "the chat template flags need --messages or --text-file (a user turn)")
	}
	specs := strings.Split(*backends, ",")
	for i := range specs {
		specs[i] = strings.TrimSpace(specs[i])
		if specs[i] == "" {
			return usageError(fs, stderr, "--backends has an empty entry: %q", *backends)
		}
	}
	if err := resolveModelFlag(dir, stderr); err != nil { // before reading ids: a bad --model says so first
		return err
	}
	var rows [][]int
	var err error
	text, haveText := "", *textFile != "" || cf.messages() != ""
	if !haveText {
		if rows, err = idf.read(); err != nil {
			return err
		}
	} else if text, err = scoredText(fs, cf, *dir, *textFile, stderr); err != nil {
		return err // a template error comes before any weight is read
	}
	var demo *tokenizer.Tokenizer
	op, err := openFlags{dir: dir, plugins: plugins, mem: mem}.open(model.OpenOptions{IDs: rows, IDsName: idf.name(),
		Run: &model.RunSize{Rows: 1, Tokens: *ctx, LogitRows: *ctx, What: "--ctx"}, BoundHeap: true}, &demo, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	m := op.Model
	if haveText {
		tok, err := textTokenizer(op, *tokPath, demo, stderr)
		if err != nil {
			return err
		}
		ids, err := tok.Encode(text)
		if err != nil {
			return err
		}
		rows = [][]int{ids}
		if err := m.CheckRows(rows, "the text's tokens do not fit this model (wrong --tokenizer?)"); err != nil && len(ids) >= 2 {
			return err
		}
	}
	for r, ids := range rows {
		if len(ids) < 2 {
			return fmt.Errorf("row %d has %s: perplexity needs at least 2", r, count(len(ids), "token"))
		}
	}
	o := bench.PerplexityOptions{Ctx: *ctx, Stride: *stride, Running: stdout}
	if *asJSON {
		o.Running = nil
		if isTerminal(stderr) {
			o.TTY = stderr
		}
	}
	run, err := bench.Perplexity(m, specs, rows, o)
	if err != nil {
		return err
	}
	if *asJSON {
		out, _ := json.MarshalIndent(run, "", "  ")
		_, err := fmt.Fprintln(stdout, string(out))
		return err
	}
	return run.WriteComparison(stdout)
}

// scoredText is --text-file, or with the chat template flags the
// conversation it renders (--messages, the text as a user turn).
func scoredText(fs *flag.FlagSet, cf chatFlags, dir, textFile string, stderr io.Writer) (string, error) {
	text := ""
	if textFile != "" {
		data, err := readText("--text-file", textFile)
		if err != nil {
			return "", err
		}
		text = string(data)
	}
	if !cf.enabled(fs) {
		return text, nil
	}
	tpl, err := cf.template(dir, true, stderr)
	if err != nil {
		return "", err
	}
	return cf.render(fs, tpl, text, stderr)
}
