package chat

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	"m-unsupported": "str.format is not supported: an error, not a guess",
	"err-include":   "include is refused when the template is parsed; jinja2 fails when it runs",
	"err-extends":   "extends is refused when the template is parsed; jinja2 fails when it runs",
	"err-import":    "import is refused when the template is parsed; jinja2 fails when it runs",
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
		t.Skip("testdata/chat/jinja_expected.json not generated yet (python3 testdata/gen/gen_chat_jinja.py testdata/chat/jinja_expected.json)")
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
