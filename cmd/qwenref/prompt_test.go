package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// promptArgs writes a case's messages and tools to files and returns the
// prompt command's flags for it: its kwargs as --chat-template-kwargs,
// and --no-generation-prompt where they leave add_generation_prompt out
// (apply_chat_template's default is False).
func promptArgs(t *testing.T, msgs, tools json.RawMessage, kwargs map[string]any) []string {
	dir := t.TempDir()
	conv, err := json.Marshal(map[string]json.RawMessage{"messages": msgs})
	require.NoError(t, err)
	args := []string{"--messages", filepath.Join(dir, "m.json")}
	require.NoError(t, os.WriteFile(args[1], conv, 0o644))
	if len(tools) > 0 {
		args = append(args, "--tools", filepath.Join(dir, "tools.json"))
		require.NoError(t, os.WriteFile(args[3], tools, 0o644))
	}
	kw, err := json.Marshal(kwargs)
	require.NoError(t, err)
	args = append(args, "--chat-template-kwargs", string(kw))
	if _, ok := kwargs["add_generation_prompt"]; !ok {
		args = append(args, "--no-generation-prompt")
	}
	return args
}

type chatCase struct {
	Name           string
	Kwargs         map[string]any
	Messages       json.RawMessage
	Tools          json.RawMessage
	Text, Error    *string
	Template       string
	ExpectedSource string
}

func readCases(t *testing.T, path string) (cases []chatCase) {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var f struct{ Cases []chatCase }
	require.NoError(t, json.Unmarshal(data, &f))
	return f.Cases
}

// qwenref prompt prints what transformers' apply_chat_template(...,
// tokenize=False) returns for Qwen3's template (testdata/chat/expected.json)
// and what jinja2 renders in transformers' environment for the
// Qwen3.5/3.6-style templates given by --chat-template-file
// (template_expected.json), byte for byte and nothing else; a template's
// raise_exception is one line with its message.
func TestPromptMatchesTransformers(t *testing.T) {
	dir := checkpointWithTemplate(t, "")
	want := map[string]string{}
	for _, c := range readCases(t, "../../testdata/chat/expected.json") {
		want[c.Name] = *c.Text
	}
	for _, c := range readCases(t, "../../testdata/chat/cases.json") {
		code, stdout, stderr := runCLI(append([]string{"prompt", "--model", dir}, promptArgs(t, c.Messages, c.Tools, c.Kwargs)...)...)
		require.Equal(t, 0, code, "%s: %s", c.Name, stderr)
		assert.Equal(t, want[c.Name], stdout, c.Name)
		assert.Empty(t, stderr, c.Name)
	}

	inputs := map[string]chatCase{}
	for _, c := range readCases(t, "../../testdata/chat/template_cases.json") {
		inputs[c.Name] = c
	}
	n := 0
	for _, w := range readCases(t, "../../testdata/chat/template_expected.json") {
		c := inputs[w.Name]
		args := append([]string{"prompt", "--model", dir, "--chat-template-file", filepath.Join("../../testdata/chat", w.Template)},
			promptArgs(t, c.Messages, c.Tools, c.Kwargs)...)
		code, stdout, stderr := runCLI(args...)
		if w.Text != nil {
			require.Equal(t, 0, code, "%s/%s: %s", w.Template, w.Name, stderr)
			assert.Equal(t, *w.Text, stdout, "%s/%s", w.Template, w.Name)
			n++
			continue
		}
		assert.Equal(t, 1, code, "%s/%s", w.Template, w.Name)
		assert.Empty(t, stdout)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s/%s: one line: %q", w.Template, w.Name, stderr)
		if msg, ok := strings.CutPrefix(*w.Error, "TemplateError: "); ok {
			assert.Contains(t, stderr, msg, "%s/%s", w.Template, w.Name)
		}
	}
	assert.Greater(t, n, 20)
}

// prompt reads the template files only: a directory with no config.json
// and no weights renders, and run reports a template's error before it
// reads any weight (here, before it finds there are none).
func TestPromptReadsNoWeights(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../testdata/chat/qwen3-tokenizer_config.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644))
	code, stdout, stderr := runCLI("prompt", "--model", dir, "--prompt", "Hi!", "--no-think")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", stdout)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ raise_exception('no system role here') }}"), 0o644))
	for _, cmd := range []string{"prompt", "run"} {
		code, _, stderr = runCLI(cmd, "--model", dir, "--chat", "--prompt", "Hi!")
		assert.Equal(t, 1, code, cmd)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s: %q", cmd, stderr)
		assert.Contains(t, stderr, "no system role here", cmd)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"prompt", "--prompt", "x"}, "missing --model"},
		{[]string{"prompt", "--model", dir}, "missing --messages"},
		{[]string{"prompt", "--model", dir, "--prompt", "x", "--chat-template-kwargs", "[1]"}, "--chat-template-kwargs: want a JSON object"},
		{[]string{"prompt", "--model", dir, "--prompt", "x", "--chat-template-kwargs", `{"add_generation_prompt": 1}`}, "add_generation_prompt must be true or false"},
	} {
		code, _, stderr := runCLI(c.args...)
		assert.Equal(t, 2, code, c.args)
		assert.Contains(t, stderr, c.want, c.args)
	}
	code, _, stderr = runCLI("prompt", "--model", filepath.Join(goldenRoot, "hub-bf16-sharded"), "--prompt", "x")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "ships no chat template")
}

// run and perplexity take the template flags: run --verbose-prompt shows
// the rendered prompt and its ids, and perplexity --messages scores the
// conversation the template renders, as --ids of its tokens would.
func TestTemplateFlagsOnRunAndPerplexity(t *testing.T) {
	dir := checkpointWithTemplate(t, "")
	code, _, stderr := runCLI("run", "--model", dir, "--prompt", "hi", "--chat-template-kwargs", `{"enable_thinking": false}`,
		"--verbose-prompt", "--max-new-tokens", "1", "--quiet")
	require.Equal(t, 0, code, stderr)
	const rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	assert.Contains(t, stderr, "prompt text:\n"+rendered+"\nprompt ids: ")
	assert.Regexp(t, `\nprompt ids: [0-9]+(,[0-9]+)+\n`, stderr, "ids as --ids takes them back")

	msgs := filepath.Join(t.TempDir(), "m.json")
	require.NoError(t, os.WriteFile(msgs, []byte(`[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"}]`), 0o644))
	code, text, stderr := runCLI("prompt", "--model", dir, "--messages", msgs, "--no-generation-prompt")
	require.Equal(t, 0, code, stderr)
	code, ids, stderr := runCLIStdin(text, "tokenize", "--tokenizer", filepath.Join(dir, "tokenizer.json"), "--text", "-", "--json")
	require.Equal(t, 0, code, stderr)
	code, byMsgs, stderr := runCLI("perplexity", "--model", dir, "--messages", msgs, "--no-generation-prompt", "--json")
	require.Equal(t, 0, code, stderr)
	code, byIDs, stderr := runCLI("perplexity", "--model", dir, "--ids", strings.TrimSpace(ids), "--json")
	require.Equal(t, 0, code, stderr)
	var a, b pplOutput
	require.NoError(t, json.Unmarshal([]byte(byMsgs), &a))
	require.NoError(t, json.Unmarshal([]byte(byIDs), &b))
	assert.Equal(t, b.Tokens, a.Tokens)
	assert.Equal(t, b.Results[0].Perplexity, a.Results[0].Perplexity)
	code, _, stderr = runCLI("perplexity", "--model", dir, "--chat")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "exactly one of")
}
