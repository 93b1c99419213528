package chat

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tokenizer"
)

type jinjaCase struct {
	Name     string                     `json:"name"`
	Template string                     `json:"template"`
	Vars     map[string]json.RawMessage `json:"vars"`
	Output   *string                    `json:"output"`
	Phase    string                     `json:"phase"`
	Error    string                     `json:"error"`
}

// jinjaDifferences are the cases where qwenref deliberately differs from
// Python's jinja2, and why.
var jinjaDifferences = map[string]string{
	"m-unsupported":       "str.format is not supported: an error, not a guess",
	"err-include":         "include is refused when the template is parsed; jinja2 fails when it runs",
	"err-extends":         "extends is refused when the template is parsed; jinja2 fails when it runs",
	"err-import":          "import is refused when the template is parsed; jinja2 fails when it runs",
	"x-bigint-arith":      "integers are 64-bit: arithmetic on an integer beyond int64 is an error",
	"x-pow-overflow":      "integers are 64-bit: a result beyond int64 is an error, not a big integer",
	"x-batch-unsupported": "the batch filter is not supported",
}

// renderCase renders a case's template with its variables as
// render_jinja_template passes them: messages, tools and
// add_generation_prompt by name, the rest as keyword arguments.
func renderCase(src string, vars map[string]json.RawMessage) (out string, parseErr, renderErr error) {
	tpl, err := Parse(src, "case")
	if err != nil {
		return "", err, nil
	}
	in := Input{Messages: json.RawMessage("[]"), Vars: map[string]any{}}
	for k, v := range vars {
		switch k {
		case "messages":
			in.Messages = v
		case "tools":
			in.Tools = v
		case "add_generation_prompt":
			in.AddGenerationPrompt = string(v) == "true"
		default:
			in.Vars[k] = v
		}
	}
	out, err = tpl.Render(in)
	return out, nil, err
}

func loadJinjaCases(t *testing.T) []jinjaCase {
	data, err := os.ReadFile("../testdata/chat/jinja_expected.json")
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("testdata/chat/jinja_expected.json is missing: regenerate it (python3 testdata/gen/gen_chat_jinja.py testdata/chat/jinja_expected.json)")
	}
	require.NoError(t, err)
	var f struct{ Cases []jinjaCase }
	require.NoError(t, json.Unmarshal(data, &f))
	require.NotEmpty(t, f.Cases)
	return f.Cases
}

// Every case renders as Python's jinja2 renders it in transformers'
// environment (testdata/chat/jinja_expected.json, from
// testdata/gen/gen_chat_jinja.py): the same text, or an error in the same
// phase (parse or render); the template's own raise_exception message comes
// through whole, and every error is one line.
func TestJinjaMatchesPython(t *testing.T) {
	for _, c := range loadJinjaCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			out, perr, rerr := renderCase(c.Template, c.Vars)
			if why, ok := jinjaDifferences[c.Name]; ok {
				assert.Error(t, errors.Join(perr, rerr), "known difference: %s", why)
				return
			}
			for _, err := range []error{perr, rerr} {
				if err != nil {
					assert.NotContains(t, err.Error(), "\n", "errors are one line")
				}
			}
			if c.Output != nil {
				require.NoError(t, perr)
				require.NoError(t, rerr)
				assert.Equal(t, *c.Output, out)
				return
			}
			switch c.Phase {
			case "parse":
				assert.Error(t, perr, "jinja2: %s", c.Error)
			case "render":
				require.NoError(t, perr, "jinja2 parses it")
				require.Error(t, rerr, "jinja2: %s", c.Error)
				if msg, ok := strings.CutPrefix(c.Error, "TemplateError: "); ok {
					var te *Error
					require.ErrorAs(t, rerr, &te)
					assert.True(t, te.Raised)
					assert.Equal(t, oneLine(msg), te.Msg, "the template's own message")
				}
			}
		})
	}
}

type templateCase struct {
	Name     string                     `json:"name"`
	Kwargs   map[string]json.RawMessage `json:"kwargs"`
	Tools    json.RawMessage            `json:"tools"`
	Messages json.RawMessage            `json:"messages"`
}

type templateResult struct {
	Template string  `json:"template"`
	Name     string  `json:"name"`
	Text     *string `json:"text"`
	Error    string  `json:"error"`
	IDs      []int   `json:"ids"`
}

func loadTemplateCases(t *testing.T) (templates map[string]*Template, cases map[string]templateCase) {
	data, err := os.ReadFile("../testdata/chat/template_cases.json")
	require.NoError(t, err)
	var spec struct {
		Templates []string
		Cases     []templateCase
	}
	require.NoError(t, json.Unmarshal(data, &spec))
	templates = map[string]*Template{}
	for _, name := range spec.Templates {
		tpl, err := LoadFile("../testdata/chat/" + name)
		require.NoError(t, err)
		templates[name] = tpl
	}
	cases = map[string]templateCase{}
	for _, c := range spec.Cases {
		cases[c.Name] = c
	}
	return templates, cases
}

func renderTemplateCase(tpl *Template, c templateCase) (string, error) {
	in := Input{Messages: c.Messages, Tools: c.Tools, Vars: map[string]any{}}
	for k, v := range c.Kwargs {
		if k == "add_generation_prompt" {
			in.AddGenerationPrompt = string(v) == "true"
			continue
		}
		in.Vars[k] = v
	}
	return tpl.Render(in)
}

// checkTemplateResults renders every conversation with each style template
// and compares with the recorded results (text, or the template's error).
func checkTemplateResults(t *testing.T, path, regenerate string, encode func(string) ([]int, error)) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing: regenerate it (%s)", path, regenerate)
	}
	require.NoError(t, err)
	var want struct{ Cases []templateResult }
	require.NoError(t, json.Unmarshal(data, &want))
	templates, cases := loadTemplateCases(t)
	require.Len(t, want.Cases, len(templates)*len(cases), "%s is stale: %s", path, regenerate)
	for _, w := range want.Cases {
		t.Run(w.Template+"/"+w.Name, func(t *testing.T) {
			tpl, c := templates[w.Template], cases[w.Name]
			require.NotNil(t, tpl)
			require.NotEmpty(t, c.Name)
			out, err := renderTemplateCase(tpl, c)
			if w.Text != nil {
				require.NoError(t, err)
				assert.Equal(t, *w.Text, out)
				if encode != nil {
					ids, err := encode(out)
					require.NoError(t, err)
					assert.Equal(t, w.IDs, ids, "the prompt's tokens")
				}
				return
			}
			require.Error(t, err, "Python: %s", w.Error)
			assert.NotContains(t, err.Error(), "\n")
			if msg, ok := strings.CutPrefix(w.Error, "TemplateError: "); ok {
				var te *Error
				require.ErrorAs(t, err, &te)
				assert.True(t, te.Raised)
				assert.Equal(t, oneLine(msg), te.Msg)
				assert.Positive(t, te.Line)
			}
		})
	}
}

// The Qwen3.5/3.6-style templates render every test conversation as
// Python's jinja2 does in transformers' environment.
func TestStyleTemplatesMatchJinja(t *testing.T) {
	checkTemplateResults(t, "../testdata/chat/template_expected.json", "python3 testdata/gen/gen_chat_jinja.py testdata/chat", nil)
}

// … and as transformers' apply_chat_template does, to the prompt's tokens.
func TestStyleTemplatesMatchTransformers(t *testing.T) {
	const path = "../testdata/chat/expected_templates.json"
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing: regenerate it (python3 testdata/gen/gen_chat_template.py testdata/chat, with transformers)", path)
	}
	tok, err := tokenizer.Load("../testdata/tokenizer/qwen3-tokenizer.json.gz")
	require.NoError(t, err)
	checkTemplateResults(t, path, "python3 testdata/gen/gen_chat_template.py testdata/chat, with transformers", tok.Encode)
}
