package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/sampling"
)

// withStdin runs f with stdin reading s.
func withStdin(t *testing.T, s string, f func()) {
	old := stdin
	stdin = strings.NewReader(s)
	defer func() { stdin = old }()
	f()
}

// The default command runs the bundled demo and says the weights are
// random; stdout holds only the generated text.
func TestRunBundledDefault(t *testing.T) {
	code, stdout, stderr := runCLI("--max-new-tokens", "3", "--compare", "all")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "RANDOM weights")
	assert.Equal(t, 3, strings.Count(stderr, "prompt ("), "one block per sample prompt")
	for _, s := range []string{"model:", "prefill", "prompt logits vs"} {
		assert.Contains(t, stderr, s)
		assert.NotContains(t, stdout, s, "stdout holds only the text")
	}
	assert.NotEmpty(t, strings.TrimSpace(stdout))
	assert.LessOrEqual(t, strings.Count(stderr, "unavailable"), 1, "a missing GPU is one note, once: %s", stderr)
}

// A plain run compares no backends (it cost half a run's time) and so
// prints no note about a missing GPU; --compare turns it on.
func TestRunComparesOnlyWhenAsked(t *testing.T) {
	code, _, stderr := runCLI("run", "--prompt", "hi", "--max-new-tokens", "2")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "prompt logits vs")
	assert.NotContains(t, stderr, "unavailable")
	assert.Contains(t, stderr, "prefill")
}

func TestRunQuiet(t *testing.T) {
	code, stdout, stderr := runCLI("run", "--prompt", "hi", "--max-new-tokens", "2", "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.NotEmpty(t, stdout)
	for _, s := range []string{"model:", "prefill", "prompt logits vs", "prompt ("} {
		assert.NotContains(t, stderr, s)
	}
	assert.Contains(t, stderr, "RANDOM weights", "the random-weights notice stays")
}

func TestRunTopProbsAndChat(t *testing.T) {
	code, stdout, stderr := runCLI("run", "--prompt", "hi", "--chat", "--top-probs", "2", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "plain ChatML", "the bundled demo has no template: a notice")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	assert.Len(t, lines, 2, "one line of probabilities per new token")
}

// --prompt -, --prompt-file FILE and --prompt-file - give the same prompt.
func TestRunPromptSources(t *testing.T) {
	args := []string{"run", "--max-new-tokens", "3", "--compare", "none", "--quiet"}
	_, want, _ := runCLI(append(args, "--prompt", "The gated delta rule")...)
	require.NotEmpty(t, want)
	var got string
	withStdin(t, "The gated delta rule", func() { _, got, _ = runCLI(append(args, "--prompt", "-")...) })
	assert.Equal(t, want, got)
	withStdin(t, "The gated delta rule", func() { _, got, _ = runCLI(append(args, "--prompt-file", "-")...) })
	assert.Equal(t, want, got)
	p := filepath.Join(t.TempDir(), "p.txt")
	require.NoError(t, os.WriteFile(p, []byte("The gated delta rule"), 0o644))
	_, got, _ = runCLI(append(args, "--prompt-file", p)...)
	assert.Equal(t, want, got)
}

func TestRunErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--temperature", "-1"}, 2, "temperature"},
		{[]string{"run", "--max-new-tokens", "0"}, 2, "--max-new-tokens"},
		// The prompt plus this overflowed int: "negative size", exit 1.
		{[]string{"generate", "--ids", "1,2", "--max-new-tokens", "9223372036854775807"}, 2, "--max-new-tokens must be 1 to 1073741824"},
		{[]string{"run", "--prompt", "x", "--max-new-tokens", "9223372036854775807"}, 2, "--max-new-tokens must be 1 to 1073741824"},
		{[]string{"run", "--compare", "some"}, 2, "--compare"},
		{[]string{"run", "--prompt", "x", "--prompt-file", "y"}, 1, "not both"},
		{[]string{"run", "--prompt-file", "/nonexistent/p.txt"}, 1, "nonexistent"},
		{[]string{"run", "--prompt", "x", "--think", "--no-think"}, 2, "not both"},
		{[]string{"run", "--model", "../../testdata/golden/hub-bf16-sharded", "--prompt", "x"}, 1, "no tokenizer"},
		{[]string{"run", "--model", "../../testdata/golden/hub-bf16-sharded"}, 2, "missing --prompt"},
	} {
		code, _, stderr := runCLI(c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, c.args)
	}
}

// checkpointWithTemplate links a golden checkpoint into a temporary
// directory with a tiny tokenizer (it fits the 200-token vocabulary) and
// Qwen3's tokenizer_config.json with its chat template.
func checkpointWithTemplate(t *testing.T, genConfig string) string {
	dir := t.TempDir()
	src, err := filepath.Abs(filepath.Join(goldenRoot, "hub-bf16-sharded"))
	require.NoError(t, err)
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == "generation_config.json" && genConfig != "" {
			continue
		}
		require.NoError(t, os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())))
	}
	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, to), data, 0o644))
	}
	copyFile("../../testdata/tokenizer/tiny/charbpe-affix.json", "tokenizer.json")
	copyFile("../../testdata/chat/qwen3-tokenizer_config.json", "tokenizer_config.json")
	if genConfig != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(genConfig), 0o644))
	}
	return dir
}

// run --chat uses the checkpoint's template (no ChatML notice) and
// generation_config.json's sampling settings, which flags override.
func TestRunCheckpointTemplateAndSampling(t *testing.T) {
	dir := checkpointWithTemplate(t, `{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": [3, 7]}`)
	code, _, stderr := runCLI("run", "--model", dir, "--system", "Be brief.", "--no-think", "--prompt", "hi", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "ChatML")
	assert.Contains(t, stderr, "temperature 0.6, top-k 20, top-p 0.95")

	code, _, stderr = runCLI("run", "--model", dir, "--prompt", "hi", "--temperature", "0", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	settings := func(dir string, args ...string) generate.GenerationSettings {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		sf := addSampleFlags(fs, 1)
		require.NoError(t, fs.Parse(args))
		g, err := sf.settings(fs, dir, io.Discard)
		require.NoError(t, err, args)
		return g
	}
	g := settings(dir, "--top-k", "5", "--min-p", "0.05", "--repetition-penalty", "1.1")
	assert.Equal(t, sampling.Config{DoSample: true, Temperature: 0.6, TopK: 5, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.1}, g.Config,
		"flags override generation_config.json's keys")
	assert.Equal(t, sampling.Config{RepetitionPenalty: 1.3}, settings(dir, "--greedy", "--repetition-penalty", "1.3").Config,
		"--greedy turns sampling off; the penalty applies greedy too")
	assert.Equal(t, sampling.Config{}, settings(dir, "--temperature", "0").Config)

	// No generation_config.json: greedy; --temperature > 0 samples with
	// transformers' defaults for the rest (top_k 50).
	assert.Equal(t, sampling.Config{}, settings(t.TempDir()).Config)
	assert.Equal(t, sampling.Config{DoSample: true, Temperature: 0.8, TopK: 50}, settings(t.TempDir(), "--temperature", "0.8").Config)
}

// generation_config.json's keys that qwenref does not apply are named once
// on stderr, and not with --quiet; its repetition penalty and min-p apply.
func TestRunReportsUnappliedSampling(t *testing.T) {
	dir := checkpointWithTemplate(t, `{"do_sample": true, "temperature": 0.7, "min_p": 0.1, "repetition_penalty": 1.05, "num_beams": 4, "presence_penalty": 1.5}`)
	code, _, stderr := runCLI("run", "--model", dir, "--prompt", "hi", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "sampling: temperature 0.7, top-k 50, min-p 0.1, seed 1, repetition penalty 1.05")
	assert.Equal(t, 1, strings.Count(stderr, "not applied by qwenref: num_beams; not used by transformers' generate either: presence_penalty"), stderr)
	code, _, stderr = runCLI("run", "--model", dir, "--prompt", "hi", "--max-new-tokens", "2", "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "num_beams")
	code, _, stderr = runCLI("run", "--model", dir, "--prompt", "hi", "--repetition-penalty", "0")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "repetition penalty must be > 0")
}

// The chat flags build the conversation transformers renders for the
// committed cases (testdata/chat/expected.json).
func TestChatFlagsMatchTransformers(t *testing.T) {
	data, err := os.ReadFile("../../testdata/chat/expected.json")
	if os.IsNotExist(err) {
		t.Skip("testdata/chat/expected.json not generated yet")
	}
	require.NoError(t, err)
	var exp struct {
		Cases []struct{ Name, Text string }
	}
	require.NoError(t, json.Unmarshal(data, &exp))
	want := map[string]string{}
	for _, c := range exp.Cases {
		want[c.Name] = c.Text
	}
	tpl, err := chat.Load(checkpointWithTemplate(t, ""))
	require.NoError(t, err)
	msgsFile := filepath.Join(t.TempDir(), "m.json")
	require.NoError(t, os.WriteFile(msgsFile, []byte(`{"messages": [
		{"role": "system", "content": "You are a pirate."},
		{"role": "user", "content": "Hello!"},
		{"role": "assistant", "content": "Arr, ahoy there, matey!"},
		{"role": "user", "content": "Where is the treasure?\nTell me quickly."}]}`), 0o644))
	// --tools takes the schemas of the "tools-declared" case.
	var cases struct {
		Cases []struct {
			Name  string
			Tools json.RawMessage
		}
	}
	data, err = os.ReadFile("../../testdata/chat/cases.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &cases))
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	for _, c := range cases.Cases {
		if c.Name == "tools-declared" {
			require.NoError(t, os.WriteFile(toolsFile, c.Tools, 0o644))
		}
	}
	for _, c := range []struct {
		name, prompt string
		args         []string
	}{
		{"tools-declared", "What's the weather in Zürich?", []string{"--tools", toolsFile}},
		{"user-only", "Give me a short introduction to large language models.", []string{"--chat"}},
		{"system-user", "What is the capital of France?", []string{"--system", "You are a helpful assistant. Answer in one sentence."}},
		{"thinking-off", "Count to three.", []string{"--no-think"}},
		{"thinking-on", "Count to three.", []string{"--think"}},
		{"system-thinking-off", "2+2?", []string{"--system", "Be terse.", "--no-think"}},
		{"multi-turn", "", []string{"--messages", msgsFile}},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		cf := addChatFlags(fs, true)
		require.NoError(t, fs.Parse(c.args))
		require.True(t, cf.enabled(fs), c.name)
		got, err := cf.render(fs, tpl, c.prompt, io.Discard)
		require.NoError(t, err, c.name)
		require.Contains(t, want, c.name)
		assert.Equal(t, want[c.name], got, c.name)
	}
}

func TestHelpVersionAndUnknown(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, _ := runCLI(args...)
		assert.Equal(t, 0, code, args)
		for _, c := range []string{"run", "forward", "perplexity", "bench", "--threads"} {
			assert.Contains(t, stdout, c, args)
		}
	}
	code, stdout, _ := runCLI("help", "perplexity")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "perplexity guide")
	for _, args := range [][]string{{"help", "nosuch"}, {"nosuch"}} {
		code, _, stderr := runCLI(args...)
		assert.Equal(t, 2, code, args)
		assert.Regexp(t, `unknown command (or topic )?"nosuch"`, stderr)
	}
	for _, v := range []string{"--version", "-v"} {
		code, stdout, _ = runCLI(v)
		assert.Equal(t, 0, code, v)
		assert.Contains(t, stdout, runtime.Version())
		assert.Contains(t, stdout, "kernels "+cpu.Describe())
		assert.Contains(t, stdout, "commit")
		assert.NotContains(t, stdout, "not built from a git checkout", "-buildvcs=false is the other reason")
	}
}

// A usage error is one line that names the problem and the help command.
func TestShortUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"forward"}, {"run", "--bogus"}, {"generate"}, {"perplexity"}, {"tokenize"}, {"run", "stray"}} {
		code, _, stderr := runCLI(args...)
		assert.Equal(t, 2, code, args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%v: %q", args, stderr)
		assert.Contains(t, stderr, "see 'qwenref help "+args[0]+"'", args)
	}
}

func TestThreadsFlag(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	code, _, stderr := runCLI("tokenize", "--text", "hi", "--threads", "1")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 1, runtime.GOMAXPROCS(0))
	code, _, _ = runCLI("tokenize", "--text", "hi", "--threads", "-1")
	assert.Equal(t, 2, code)
	// GOMAXPROCS takes an int32 (2³¹ crashes the runtime) and sets up
	// each thread's state (10⁶ of them: 20 GB): refused as usage errors.
	for _, n := range []string{"2147483648", "9223372036854775807", "1000000"} {
		code, _, stderr = runCLI("tokenize", "--text", "hi", "--threads", n)
		assert.Equal(t, 2, code, n)
		assert.Contains(t, stderr, "--threads must be 0 to")
	}
	assert.Equal(t, 1, runtime.GOMAXPROCS(0))
}

// A GOMAXPROCS from the environment past the --threads cap (the runtime
// takes it at start, as it does here) is held to the cap, with a note.
func TestThreadsFromEnvironmentCapped(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	hi := maxThreads()
	runtime.GOMAXPROCS(hi + 1)
	code, _, stderr := runCLI("tokenize", "--text", "hi")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, hi, runtime.GOMAXPROCS(0))
	assert.Contains(t, stderr, fmt.Sprintf("GOMAXPROCS %d from the environment is more than %d", hi+1, hi))
}

// A bad QWENREF_CPU exits 2 with cpu.Check's message (the level is chosen
// at start, so this runs in a child process).
func TestBadKernelLevelEnv(t *testing.T) {
	if os.Getenv("QWENREF_TEST_MAIN") == "1" {
		os.Exit(Main([]string{"tokenize", "--text", "x"}, os.Stdout, os.Stderr))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadKernelLevelEnv$")
	cmd.Env = append(os.Environ(), "QWENREF_TEST_MAIN=1", "QWENREF_CPU=bogus")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, errb.String(), "QWENREF_CPU")
}

// Ids come from --ids (list or JSON), --ids-json or stdin, alike.
func TestIDsSources(t *testing.T) {
	dir := filepath.Join(goldenRoot, "hub-bf16-sharded")
	args := []string{"generate", "--model", dir, "--max-new-tokens", "4", "--greedy", "--json"}
	code, want, stderr := runCLI(append(args, "--ids", "5,17,42")...)
	require.Equal(t, 0, code, stderr)
	p := writeIDs(t, t.TempDir(), [][]int{{5, 17, 42}})
	for name, run := range map[string]func() (int, string, string){
		"--ids JSON":   func() (int, string, string) { return runCLI(append(args, "--ids", "[5, 17, 42]")...) },
		"--ids-json":   func() (int, string, string) { return runCLI(append(args, "--ids-json", p)...) },
		"--ids -":      func() (int, string, string) { return runCLIStdin("5 17 42\n", append(args, "--ids", "-")...) },
		"--ids-json -": func() (int, string, string) { return runCLIStdin("[[5,17,42]]", append(args, "--ids-json", "-")...) },
	} {
		code, got, stderr := run()
		require.Equal(t, 0, code, "%s: %s", name, stderr)
		assert.Equal(t, want, got, name)
	}
	code, _, stderr = runCLI(append(args, "--ids", "1", "--ids-json", p)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "not both")
	// forward takes --ids too.
	out := filepath.Join(t.TempDir(), "o.safetensors")
	code, _, stderr = runCLI("forward", "--model", dir, "--ids", "5,17,42", "--out", out)
	require.Equal(t, 0, code, stderr)
}

func runCLIStdin(in string, args ...string) (code int, stdout, stderr string) {
	old := stdin
	stdin = strings.NewReader(in)
	defer func() { stdin = old }()
	return runCLI(args...)
}

func TestTokenizerFallbackAndWarnings(t *testing.T) {
	empty := t.TempDir()
	var w strings.Builder
	tok, err := generate.LoadTokenizer(empty, "", 151936, bundled.Tokenizer, &w)
	require.NoError(t, err)
	assert.Equal(t, 151669, tok.VocabSize())
	assert.Contains(t, w.String(), "embedded Qwen3 tokenizer")
	_, err = generate.LoadTokenizer(empty, "", 200, bundled.Tokenizer, io.Discard)
	assert.ErrorContains(t, err, "does not fit")
	w.Reset()
	_, err = generate.LoadTokenizer(empty, "../../testdata/tokenizer/tiny/bytelevel.json", 200, bundled.Tokenizer, &w)
	require.NoError(t, err)
	assert.Contains(t, w.String(), "the model's vocabulary is 200")
}

func TestProgressOnlyOnTerminals(t *testing.T) {
	assert.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f))
}

func TestGenerateMatchesGolden(t *testing.T) {
	dir := filepath.Join(goldenRoot, "hub-bf16-sharded")
	var in struct {
		IDs      [][]int `json:"ids"`
		Generate struct {
			MaxNewTokens int     `json:"max_new_tokens"`
			NewIDs       [][]int `json:"new_ids"`
		} `json:"generate"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &in))
	ids, _ := json.Marshal(in.IDs[0])
	list := strings.Trim(string(ids), "[]")
	for _, be := range []string{"naive", defaultBackend()} {
		code, stdout, stderr := runCLI("generate", "--model", dir, "--ids", list, "--max-new-tokens",
			"10", "--greedy", "--backend", be, "--json")
		require.Equal(t, 0, code, stderr)
		var got []int
		require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
		assert.Equal(t, in.Generate.NewIDs[0], got, be)
	}
	code, _, stderr := runCLI("generate", "--model", dir, "--ids", "1,999")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "outside the vocabulary")
	code, _, stderr = runCLI("generate", "--ids", "1,x")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `"x"`)
	code, _, _ = runCLI("generate")
	assert.Equal(t, 2, code)
}

func TestTokenizeCommand(t *testing.T) {
	code, stdout, stderr := runCLI("tokenize", "--text", "Hello, world", "--json")
	require.Equal(t, 0, code, stderr)
	var ids []int
	require.NoError(t, json.Unmarshal([]byte(stdout), &ids))
	require.NotEmpty(t, ids)
	list, _ := json.Marshal(ids)
	code, stdout, _ = runCLI("tokenize", "--decode", strings.Trim(string(list), "[]"), "--json")
	require.Equal(t, 0, code)
	var s string
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	assert.Equal(t, "Hello, world", s)
	code, viaStdin, _ := runCLIStdin("Hello, world", "tokenize", "--text-file", "-", "--json")
	require.Equal(t, 0, code)
	assert.Equal(t, string(list)+"\n", viaStdin)
	code, _, _ = runCLI("tokenize")
	assert.Equal(t, 2, code)
	// Two inputs are a usage error before either is read; errors name the flag given.
	code, _, stderr = runCLI("tokenize", "--text", "x", "--text-file", "/nonexistent.txt")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "give exactly one of --text, --text-file and --decode")
	code, _, stderr = runCLI("tokenize", "--text-file", "/nonexistent.txt")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--text-file: ")
	assert.NotContains(t, stderr, "--prompt-file")
	code, _, stderr = runCLI("tokenize", "--tokenizer", "/nonexistent.json", "--text", "x")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "nonexistent")
}

// run says on stderr which CPU kernel level it runs (issue: every build
// says what it runs), and only text goes to stdout.
func TestRunNamesTheKernelLevel(t *testing.T) {
	code, stdout, stderr := runCLI("run", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "CPU kernels "+cpu.Describe())
	assert.NotContains(t, stdout, "CPU kernels")
}

// fullWriter fails every write, as a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// Output that does not arrive is a failure (exit 1, naming the error),
// for every command that writes results to stdout.
func TestStdoutWriteErrorsFail(t *testing.T) {
	for _, args := range [][]string{
		{"tokenize", "--text", "hi"},
		{"tokenize", "--decode", "9707", "--json"},
		{"generate", "--ids", "1,2", "--max-new-tokens", "1"},
		{"run", "--prompt", "hi", "--max-new-tokens", "1", "--compare", "none"},
		{"perplexity", "--ids", "1,2,3", "--json"},
		{"perplexity", "--ids", "1,2,3"},
		{"trace", "--ids", "1,2"},
		{"chat", "--max-new-tokens", "2"},
		{"prompt", "--chat-template-file", "../../testdata/chat/qwen3-tokenizer_config.json", "--prompt", "hi"},
		{"bench", "--model", filepath.Join(goldenRoot, "hub-bf16-sharded"), "--pp", "4", "--tg", "0", "--reps", "1"},
	} {
		var stderr bytes.Buffer
		var code int
		withStdin(t, "hi\nho\n", func() { code = Main(args, fullWriter{}, &stderr) })
		assert.Equal(t, 1, code, "%v: %s", args, stderr.String())
		assert.Contains(t, stderr.String(), "qwenref "+args[0]+": writing stdout: no space left on device", args)
	}
}

// --gpu is offered by the commands that run backends, and only by them.
func TestGPUFlagOnlyWhereBackendsRun(t *testing.T) {
	for cmd, want := range map[string]bool{"run": true, "forward": true, "generate": true, "perplexity": true, "bench": true,
		"trace": true, "check": true, "tokenize": false, "synth": false, "golden": false, "doctor": false, "download": false} {
		_, stdout, _ := runHelp(cmd)
		assert.Equal(t, want, strings.Contains(stdout, "-gpu"), cmd)
	}
	code, _, stderr := runCLI("tokenize", "--gpu", "1", "--text", "x")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "flag provided but not defined: -gpu")
}

// run --chat shows the reply's reasoning apart as chat does: the
// Qwen3.5-style template's thinking prompt opens <think>, so the whole
// reply of the random model is reasoning, labelled (show), left out
// (hide) or as generated (raw); with thinking off it is the answer.
// --reasoning without --chat is refused.
func TestRunChatShowsReasoningApart(t *testing.T) {
	args := []string{"run", "--chat-template-file", "../../testdata/chat/qwen35-style.jinja", "--prompt", "hi", "--max-new-tokens", "6", "--quiet"}
	out := func(extra ...string) string {
		code, stdout, stderr := runCLI(append(slices.Clone(args), extra...)...)
		require.Equal(t, 0, code, stderr)
		return stdout
	}
	raw := out("--think", "--reasoning", "raw")
	require.NotEmpty(t, strings.TrimSpace(raw))
	assert.NotContains(t, raw, "</think>", "the random model writes no end to its reasoning")
	assert.Equal(t, "Reasoning:\n"+strings.TrimLeft(raw, "\n"), out("--think"), "show is the default")
	assert.Equal(t, "\n", out("--think", "--reasoning", "hide"), "all of it is reasoning")
	noThink := out("--no-think", "--reasoning", "raw")
	assert.Equal(t, noThink, out("--no-think", "--reasoning", "hide"), "the prompt closed the reasoning: all answer")

	code, _, stderr := runCLI("run", "--prompt", "hi", "--reasoning", "hide")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--reasoning goes with --chat")
	code, _, stderr = runCLI("run", "--chat", "--prompt", "hi", "--reasoning", "dim")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--reasoning must be show, hide or raw, got "dim"`)
}

// run --continue-final-message continues the final message of --messages
// (the prompt ends after its content, with or without the redundant
// --no-generation-prompt, as transformers takes both), and is refused when
// that message is not an assistant's: --prompt adds a user message last.
func TestRunContinueFinalMessage(t *testing.T) {
	msgs := filepath.Join(t.TempDir(), "m.json")
	require.NoError(t, os.WriteFile(msgs, []byte(`[{"role": "user", "content": "Count."}, {"role": "assistant", "content": "One, two,"}]`), 0o644))
	args := []string{"run", "--chat-template-file", qwen3Tpl, "--messages", msgs, "--continue-final-message", "--max-new-tokens", "1", "--verbose-prompt"}
	code, rendered, stderr := runCLI("prompt", "--chat-template-file", qwen3Tpl, "--messages", msgs, "--continue-final-message")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasSuffix(rendered, "One, two,"), "prompt renders as transformers does: %q", rendered)
	for _, extra := range [][]string{nil, {"--no-generation-prompt"}} {
		code, _, stderr := runCLI(append(slices.Clone(args), extra...)...)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stderr, "prompt text:\n"+rendered+"\nprompt ids:", extra)
	}
	code, _, stderr = runCLI(append(slices.Clone(args), "--prompt", "hi")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `--continue-final-message: the final message is the user's (role "user"): a reply continues an assistant message, so the conversation must end with one (--prompt adds a user message last)`)
}
