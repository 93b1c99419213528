package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "run", summary: "generate text from a prompt (default command; no flags: the bundled demo)", run: runRun})
}

// sampleFlags are the generation flags shared by run, generate and chat.
type sampleFlags struct {
	maxNew                           *int
	temperature, topP, minP, penalty *float64
	topK                             *int
	seed                             *uint64
	greedy                           *bool
}

func addSampleFlags(fs *flag.FlagSet, maxNew int) sampleFlags {
	return sampleFlags{
		maxNew:      fs.Int("max-new-tokens", maxNew, "stop after this many new tokens"),
		temperature: fs.Float64("temperature", 0, "sampling temperature; > 0 samples, 0 = greedy (argmax) (default: generation_config.json's)"),
		topK:        fs.Int("top-k", 0, "sample only from the K most likely tokens (0 = off) (default: generation_config.json's, 50 when it samples)"),
		topP:        fs.Float64("top-p", 0, "sample only from the smallest set with probability ≥ P (1 = off) (default: generation_config.json's)"),
		minP:        fs.Float64("min-p", 0, "drop tokens less likely than P × the most likely (0 = off) (default: generation_config.json's)"),
		penalty:     fs.Float64("repetition-penalty", 0, "penalize every token already seen, the prompt's too (1 = off) (default: generation_config.json's)"),
		seed:        fs.Uint64("seed", 1, "random seed for sampling"),
		greedy:      fs.Bool("greedy", false, "decode greedily (argmax), whatever generation_config.json says"),
	}
}

// maxNewTokens caps --max-new-tokens at the longest max_position_embeddings
// a config may declare (model's limit), so that the prompt plus it cannot
// overflow an int before the length check names the model's own limit.
const maxNewTokens = 1 << 30

// checkMaxNew refuses a --max-new-tokens outside 1 to maxNewTokens.
func (s sampleFlags) checkMaxNew(fs *flag.FlagSet, stderr io.Writer) error {
	if n := *s.maxNew; n <= 0 || n > maxNewTokens {
		return usageError(fs, stderr, "--max-new-tokens must be 1 to %d, got %d", maxNewTokens, n)
	}
	return nil
}

// settings applies the flags given to generation_config.json's sampling;
// info hears what it is and, once, the file's keys not applied.
func (s sampleFlags) settings(fs *flag.FlagSet, dir string, info io.Writer) (generate.GenerationSettings, error) {
	o := generate.SamplingOverrides{Greedy: *s.greedy, Seed: *s.seed}
	for name, p := range map[string]**float64{"temperature": &o.Temperature, "top-p": &o.TopP, "min-p": &o.MinP, "repetition-penalty": &o.RepetitionPenalty} {
		if v := fs.Lookup(name).Value.(flag.Getter).Get().(float64); flagWasSet(fs, name) {
			*p = &v
		}
	}
	if flagWasSet(fs, "top-k") {
		o.TopK = s.topK
	}
	if err := o.Validate(); err != nil {
		return generate.GenerationSettings{}, usageError(fs, fs.Output(), "%v", err)
	}
	g, err := generate.LoadGenerationSettings(dir, o)
	if err != nil {
		return g, err
	}
	if desc := g.String(); g.Path != "" && desc != "greedy" {
		fmt.Fprintf(info, "sampling: %s (%s; flags override)\n", desc, safeio.Clean(g.Path))
	}
	if !g.Report.Empty() {
		fmt.Fprintf(info, "warning: %s: %s\n", safeio.Clean(g.Path), g.Report)
	}
	return g, nil
}

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "[--model DIR] [--prompt TEXT | --prompt-file F] [--chat [--system S] [--think|--no-think] | --messages F.json] [--backend B] [--max-new-tokens N]", `
Generates text. With no flags it runs the bundled demo: a tiny model of the
Qwen3.5 architecture with random weights and the real Qwen3 tokenizer, on a
few sample prompts, so every stage of the pipeline runs with no download.

With --model DIR it loads a Qwen3.5/3.6 checkpoint (config.json,
tokenizer.json and safetensors, hub or flat layout). Only the generated text
goes to stdout, streamed as it is produced; the model line, prefill and
decode speed, and one line comparing the prompt logits of the other
backends go to stderr (--quiet leaves them out). The prompt comes from
--prompt, --prompt-file FILE, or stdin (--prompt - or --prompt-file -).

--chat renders the checkpoint's own chat template (chat_template.jinja or
tokenizer_config.json, as transformers' apply_chat_template does) around
the prompt; --system adds a system message, --think / --no-think set the
template's enable_thinking, --messages FILE.json gives the whole
conversation (a JSON array of {"role", "content", ...} objects, or
{"messages": [...], "tools": [...]}), --tools FILE.json tool schemas, and
--continue-final-message continues its final message, an assistant's. A
checkpoint without a template gets plain ChatML, with a notice. The
reply's reasoning (<think>…</think>) is shown apart, as chat shows it.

Sampling is what transformers' generate builds from the checkpoint's
generation_config.json (repetition_penalty, temperature, top_k, top_p,
min_p, typical_p, …; top_k 50 when sampling and unset), the flags applied
first; without the file, decoding is greedy. Keys not applied are named.

Examples:
  qwenref                                   # the bundled demo
  qwenref run --model DIR --prompt "My favourite condiment is"
  qwenref run --model DIR --chat --system "Be brief." --no-think --prompt "Hi!"
  echo "Once upon a time" | qwenref run --model DIR --prompt - --quiet > out.txt
  qwenref run --top-probs 3 --max-new-tokens 5   # per-token probabilities`, stderr)
	dir := addModelFlag(fs, demoModel)
	tokPath := fs.String("tokenizer", "", "tokenizer.json to use instead of DIR/tokenizer.json")
	promptFlag := fs.String("prompt", "", "prompt text, or - to read it from stdin (default: the bundled sample prompts)")
	promptFile := fs.String("prompt-file", "", "read the prompt from this file (- for stdin)")
	cf := addChatFlags(fs, true)
	cf.reply = true
	reasoning := addReasoningFlag(fs, "how a --chat reply shows its")
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	topProbs := fs.Int("top-probs", 0, "print the K most likely tokens with probabilities for each new token (0 to 100)")
	compare := fs.String("compare", "none", "compare prompt logits across backends (on stderr): auto (those not too slow), all, or none; off by default, as it costs about as much as the run")
	quiet := fs.Bool("quiet", false, "leave out the model line, speeds and backend comparison (stderr)")
	verbosePrompt := fs.Bool("verbose-prompt", false, "print the prompt as the model sees it (rendered, and its token ids) on stderr")
	sf := addSampleFlags(fs, 24)
	mem := addMemoryFlag(fs)
	checkW := addCheckWeightsFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !slices.Contains([]string{"auto", "all", "none"}, *compare) {
		return usageError(fs, stderr, "--compare must be auto, all or none, got %q", *compare)
	}
	if err := sf.checkMaxNew(fs, stderr); err != nil {
		return err
	}
	if *topProbs < 0 || *topProbs > maxTopProbs {
		return usageError(fs, stderr, "--top-probs must be 0 to %d, got %d", maxTopProbs, *topProbs)
	}
	if err := generate.CheckReasoning(*reasoning); err != nil {
		return usageError(fs, stderr, "%v", err)
	} else if flagWasSet(fs, "reasoning") && !cf.enabled(fs) {
		return usageError(fs, stderr, "--reasoning goes with --chat: a plain prompt's text is printed as generated")
	}
	prompt, havePrompt, err := readPrompt(*promptFlag, *promptFile)
	if err != nil {
		return err
	}
	if *dir != "" && !havePrompt && cf.messages() == "" {
		return usageError(fs, stderr, "missing --prompt (or --prompt-file, or --messages) with --model")
	}
	info := stderr
	if *quiet {
		info, *compare = io.Discard, "none"
	}
	// The template renders before any weight is read: its errors come first.
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	prompts := bundled.SamplePrompts
	if havePrompt {
		prompts = []string{prompt}
	} else if cf.messages() != "" {
		prompts = []string{""}
	}
	texts := slices.Clone(prompts)
	if cf.enabled(fs) {
		tpl, err := cf.template(*dir, true, stderr)
		if err != nil {
			return err
		}
		for i, p := range prompts {
			if texts[i], err = cf.render(fs, tpl, p, stderr); err != nil {
				return err
			}
		}
	}
	g, err := sf.settings(fs, *dir, info)
	if err != nil {
		return err
	}
	op, tok, err := openFlags{dir, backend, plugins, mem, checkW}.openText(model.OpenOptions{BoundHeap: true}, *tokPath, stderr, info)
	if err != nil {
		return err
	}
	defer op.Close()
	m, be := op.Model, op.Backend
	lin, full := m.Config.CountLayers()
	kernels := model.CPUKernels().Name
	if be.Precision == model.PrecisionBF16 && be.Device == nil {
		kernels += " · bf16 " + model.CPUKernels().BF16
	}
	fmt.Fprintf(info, "model: %d layers (%d Gated DeltaNet + %d gated attention), hidden %d, vocab %d · backend %s · CPU kernels %s\n",
		len(m.Config.LayerTypes), lin, full, m.Config.HiddenSize, m.Config.VocabSize, be.Name, kernels)
	var cmp model.BackendComparer
	for i, p := range prompts {
		ids, err := tok.Encode(texts[i])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return errors.New("the prompt encodes to no tokens: give a non-empty --prompt")
		}
		if err := m.CheckRows([][]int{ids}, "the prompt's tokens do not fit this model (wrong --tokenizer?)"); err != nil {
			return err
		}
		if err := op.CheckGeneration(1, len(ids), len(ids)+*sf.maxNew, cmp.LogitRows(*compare, len(ids)), "the prompt plus --max-new-tokens"); err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(info, "prompt (%s): %q\n", count(len(ids), "token"), p)
		if *verbosePrompt {
			fmt.Fprintf(stderr, "prompt text:\n%s\nprompt ids: %s\n", texts[i], strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]")) // as --ids takes them
		}
		po := generate.PrintOptions{TopProbs: *topProbs}
		if cf.enabled(fs) { // the reply's reasoning apart, as chat shows it
			po.Reasoning, po.Dim, po.InReasoning, po.EOS = *reasoning, isTerminal(stdout), generate.OpensReasoning(texts[i]), m.Config.EOSTokenIDs
		}
		res, err := generate.Print(m, tok, be, ids, generate.GenerateOptions{MaxNewTokens: *sf.maxNew, Sampling: g.Config, Seed: g.Seed}, po, stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(info, "[%s]\n", res)
		if *compare != "none" {
			line, notes := cmp.Compare(m, be, ids, *compare == "all")
			for _, n := range notes {
				fmt.Fprintf(info, "note: %s\n", n)
			}
			fmt.Fprintln(info, line)
		}
	}
	return nil
}

// count writes n and the noun, plural unless n is 1: "1 token", "8 tokens".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
