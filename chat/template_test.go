package chat

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tokenizer"
)

type chatCase struct {
	Name     string          `json:"name"`
	Kwargs   map[string]any  `json:"kwargs"`
	Tools    json.RawMessage `json:"tools"`
	Messages json.RawMessage `json:"messages"`
}

func loadCases(t *testing.T) []chatCase {
	var f struct{ Cases []chatCase }
	data, err := os.ReadFile("../testdata/chat/cases.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &f))
	require.NotEmpty(t, f.Cases)
	return f.Cases
}

func qwen3Template(t *testing.T) *Template {
	dir := t.TempDir()
	data, err := os.ReadFile("../testdata/chat/qwen3-tokenizer_config.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644))
	tpl, err := Load(dir)
	require.NoError(t, err)
	return tpl
}

func render(t *testing.T, tpl *Template, c chatCase) string {
	vars := map[string]any{}
	agp := false
	for k, v := range c.Kwargs {
		if k == "add_generation_prompt" {
			agp = v.(bool)
			continue
		}
		vars[k] = v
	}
	out, err := tpl.Render(Input{Messages: c.Messages, Tools: c.Tools, AddGenerationPrompt: agp, Vars: vars})
	require.NoError(t, err, c.Name)
	return out
}

// Qwen3's template renders every committed conversation exactly as
// transformers' apply_chat_template does (testdata/chat/expected.json).
func TestQwen3TemplateMatchesTransformers(t *testing.T) {
	var want struct {
		Transformers string `json:"transformers"`
		Cases        []struct {
			Name string `json:"name"`
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"cases"`
	}
	data, err := os.ReadFile("../testdata/chat/expected.json")
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("testdata/chat/expected.json is missing: regenerate it (testdata/gen/gen_chat_template.py)")
	}
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &want))
	cases := loadCases(t)
	require.Len(t, want.Cases, len(cases), "expected.json is stale: regenerate it from cases.json")
	tpl := qwen3Template(t)
	assert.True(t, tpl.UsesThinking())
	for i, c := range cases {
		require.Equal(t, c.Name, want.Cases[i].Name)
		assert.Equal(t, want.Cases[i].Text, render(t, tpl, c), c.Name)
	}
}

// The rendered prompts encode to the ids HF tokenizers gives for
// transformers' text: the whole chat path, template and tokenizer.
func TestQwen3PromptIDsMatchTransformers(t *testing.T) {
	var want struct {
		Cases []struct {
			Name string `json:"name"`
			IDs  []int  `json:"ids"`
		} `json:"cases"`
	}
	data, err := os.ReadFile("../testdata/chat/expected.json")
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("testdata/chat/expected.json is missing: regenerate it")
	}
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &want))
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3-tokenizer.json.gz")
	require.NoError(t, err)
	tpl := qwen3Template(t)
	for i, c := range loadCases(t) {
		require.NotEmpty(t, want.Cases[i].IDs, c.Name)
		ids, err := tok.Encode(render(t, tpl, c))
		require.NoError(t, err)
		assert.Equal(t, want.Cases[i].IDs, ids, c.Name)
	}
}

func TestLoadOrderAndErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	assert.ErrorIs(t, err, ErrNoTemplate)

	write := func(name, s string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644))
	}
	write("chat_template.json", `{"chat_template": "from-processor"}`)
	tpl, err := Load(dir)
	require.NoError(t, err)
	assert.Equal(t, "from-processor", tpl.Source)

	write("tokenizer_config.json", `{"eos_token": {"content": "<e>"}, "chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "{{ eos_token }}"}]}`)
	tpl, err = Load(dir)
	require.NoError(t, err)
	out, err := tpl.Render(Input{Messages: Messages()})
	require.NoError(t, err)
	assert.Equal(t, "<e>", out, "special tokens are template variables")

	write("chat_template.jinja", "jinja wins")
	tpl, err = Load(dir)
	require.NoError(t, err)
	assert.Equal(t, "jinja wins", tpl.Source)

	write("chat_template.jinja", "{% for %}")
	_, err = Load(dir)
	assert.ErrorContains(t, err, "chat_template.jinja")

	require.NoError(t, os.Remove(filepath.Join(dir, "chat_template.jinja")))
	write("tokenizer_config.json", `{"chat_template": 7}`)
	_, err = Load(dir)
	assert.ErrorContains(t, err, "tokenizer_config.json")
}

func TestRenderErrors(t *testing.T) {
	tpl := MustParse("line one\n{{ raise_exception('no system role') }}", "test")
	_, err := tpl.Render(Input{Messages: Messages(Message{"user", "x"})})
	assert.EqualError(t, err, "test:2: the template raised an error: no system role")

	tpl = MustParse(ChatML, "chatml")
	_, err = tpl.Render(Input{Messages: json.RawMessage(`{"role": "user"}`)})
	assert.ErrorContains(t, err, "array")
	_, err = tpl.Render(Input{Messages: json.RawMessage(`[{"role": `)})
	assert.ErrorContains(t, err, "messages")

	tpl = MustParse(`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, "loop")
	tpl.Timeout = 200 * time.Millisecond
	start := time.Now()
	_, err = tpl.Render(Input{Messages: Messages()})
	assert.ErrorIs(t, err, ErrLimit)
	assert.ErrorContains(t, err, "did not finish within 200ms")
	assert.Less(t, time.Since(start), 2*time.Second)

	// Errors carry the line where they arose, inside macros too.
	for src, want := range map[string]string{
		"a\nb\n\n{{ nope.attr }}": "t:4: 'nope' is undefined",
		"{% macro m() %}\n\n{{ 1 + 'a' }}{% endmacro %}\n{{ m()|trim }}": "t:3: unsupported operand type(s) for +: 'int' and 'str'",
		"{% for x in [1] %}\n{{ x.a.b }}\n{% endfor %}":                  "t:2: 'int object' has no attribute 'a'",
		"x\n{{ [1][0:1:0] }}": "t:2: slice step cannot be zero",
	} {
		_, err := MustParse(src, "t").Render(Input{Messages: Messages()})
		assert.EqualError(t, err, want, src)
	}

	_, err = Parse(`{% include '/etc/hostname' %}`, "include")
	assert.ErrorContains(t, err, "may not load other templates", "templates may not read files")
}

// Render stops when its context is done.
func TestRenderContextCancel(t *testing.T) {
	tpl := MustParse(`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, "loop")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := tpl.RenderContext(ctx, Input{Messages: Messages()})
	assert.ErrorContains(t, err, "rendering stopped: context deadline exceeded")
}

// The conversation is checked before the template sees it: what
// json.loads would not read cleanly, and messages that are not objects with
// a string role.
func TestRenderRefusesBadInput(t *testing.T) {
	tpl := MustParse(ChatML, "chatml")
	for name, c := range map[string]struct{ msgs, tools, want string }{
		"invalid UTF-8":    {msgs: "[{\"role\": \"user\", \"content\": \"a\xffb\"}]", want: "messages: invalid UTF-8 at byte 31"},
		"lone surrogate":   {msgs: `[{"role": "user", "content": "\ud800x"}]`, want: `messages: a lone surrogate \ud800`},
		"lone low":         {msgs: `[{"role": "user", "content": "\udc00"}]`, want: `lone surrogate \udc00`},
		"not an object":    {msgs: `["hello"]`, want: "messages[0]: want a message object, got a string"},
		"no role":          {msgs: `[{"role": "user", "content": "a"}, {"content": "b"}]`, want: `messages[1]: the message has no string "role"`},
		"role not string":  {msgs: `[{"role": 1}]`, want: `messages[0]: the message has no string "role"`},
		"tools not array":  {msgs: `[]`, tools: `{"a": 1}`, want: "tools: want a JSON array"},
		"tool not object":  {msgs: `[]`, tools: `[1]`, want: "tools[0]: want a tool schema object, got a number"},
		"trailing data":    {msgs: `[] []`, want: "messages: trailing data"},
		"too deep":         {msgs: strings.Repeat("[", 200) + strings.Repeat("]", 200), want: "messages: JSON nested deeper than 100 levels"},
		"escaped pair ok?": {msgs: `[{"role": "user", "content": "\ud83d\ude00"}]`},
	} {
		_, err := tpl.Render(Input{Messages: json.RawMessage(c.msgs), Tools: json.RawMessage(c.tools)})
		if c.want == "" {
			assert.NoError(t, err, name)
			continue
		}
		assert.ErrorContains(t, err, c.want, name)
	}
	out, err := MustParse(`{{ messages[0].content }}`, "t").Render(Input{Messages: json.RawMessage(`[{"role": "user", "content": "\ud83d\ude00"}]`)})
	require.NoError(t, err)
	assert.Equal(t, "😀", out)
}

// Vars reach the template as Python values: JSON as json.loads reads it,
// Go values by kind, maps with sorted keys.
func TestRenderVars(t *testing.T) {
	tpl := MustParse(`{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e }}|{{ f }}|{{ g is defined }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}`, "vars")
	out, err := tpl.Render(Input{Messages: Messages(), Vars: map[string]any{
		"a": json.RawMessage(`{"z": 1, "a": [1.0, null, true]}`), "b": 5, "c": 2.0, "d": map[string]any{"y": nil, "x": "s"},
		"e": []any{false, json.Number("12345678901234567890")}, "f": struct{ N int }{3},
	}})
	require.NoError(t, err)
	assert.Equal(t, "{'z': 1, 'a': [1.0, None, True]}|5|2.0|{'x': 's', 'y': None}|[False, 12345678901234567890]|{'N': 3}|False|False|None|None", out)
}

func TestChatML(t *testing.T) {
	tpl := MustParse(ChatML, "chatml")
	out, err := tpl.Render(Input{Messages: Messages(Message{"system", "S"}, Message{"user", "Hi"}), AddGenerationPrompt: true})
	require.NoError(t, err)
	assert.Equal(t, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", out)
}

// items keeps the JSON key order, as a Python dict does.
func TestItemsKeepsOrder(t *testing.T) {
	tpl := MustParse(`{% for k, v in messages[0]|items %}{{ k }}={{ v }};{% endfor %}`, "items")
	out, err := tpl.Render(Input{Messages: json.RawMessage(`[{"z": 1, "role": "user", "a": "x", "m": true}]`)})
	require.NoError(t, err)
	assert.Equal(t, "z=1;role=user;a=x;m=True;", out)
}

// LoadFile reads Jinja text, or the chat_template (and special tokens) of
// a JSON config.
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	jinja := filepath.Join(dir, "t.jinja")
	require.NoError(t, os.WriteFile(jinja, []byte("{{ bos_token }}{{ messages|length }}\n"), 0o644))
	tpl, err := LoadFile(jinja)
	require.NoError(t, err)
	out, err := tpl.Render(Input{Messages: Messages(Message{"user", "x"})})
	require.NoError(t, err)
	assert.Equal(t, "1", out, "one trailing newline is dropped, as Jinja does")

	cfg := filepath.Join(dir, "tokenizer_config.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"bos_token": "<s>", "chat_template": "{{ bos_token }}!"}`), 0o644))
	tpl, err = LoadFile(cfg)
	require.NoError(t, err)
	out, err = tpl.Render(Input{Messages: Messages()})
	require.NoError(t, err)
	assert.Equal(t, "<s>!", out)

	require.NoError(t, os.WriteFile(cfg, []byte(`{"bos_token": "<s>"}`), 0o644))
	_, err = LoadFile(cfg)
	assert.ErrorIs(t, err, ErrNoTemplate)
	_, err = LoadFile(filepath.Join(dir, "missing.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = LoadFile(filepath.Join(dir, "missing.jinja"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	require.NoError(t, os.WriteFile(jinja, []byte("ok\n{% if %}"), 0o644))
	_, err = LoadFile(jinja)
	assert.EqualError(t, err, jinja+":2: Expected an expression, got 'end of statement block'")
}
