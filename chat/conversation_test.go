package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConversation(t *testing.T) {
	msgs, tools, err := ParseConversation([]byte(` [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]`))
	require.NoError(t, err)
	assert.Len(t, msgs, 2)
	assert.Nil(t, tools)
	msgs, tools, err = ParseConversation([]byte(`{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]}`))
	require.NoError(t, err)
	assert.Len(t, msgs, 1)
	assert.JSONEq(t, `[{"type": "function"}]`, string(tools))
	msgs, _, err = ParseConversation([]byte(`[]`))
	require.NoError(t, err, "an empty conversation is the template's to refuse")
	assert.Empty(t, msgs)
	_, _, err = ParseConversation([]byte(`"hi"`))
	assert.ErrorContains(t, err, "want a JSON array of messages")
}

func TestParseVars(t *testing.T) {
	vars, gen, err := ParseVars([]byte(`{"enable_thinking": false, "add_generation_prompt": true, "n": 1.50}`))
	require.NoError(t, err)
	require.NotNil(t, gen)
	assert.True(t, *gen)
	assert.Len(t, vars, 2)
	tpl := MustParse("{{ enable_thinking }} {{ n }}", "t")
	out, err := tpl.Render(Input{Messages: json.RawMessage(`[]`), Vars: vars})
	require.NoError(t, err)
	assert.Equal(t, "False 1.5", out, "values as Python's json.loads reads them")
	for _, bad := range []string{`[1]`, `null`, `{"add_generation_prompt": "yes"}`, `{`} {
		_, _, err := ParseVars([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// A template file given instead of the checkpoint's still sees the
// checkpoint's special tokens, unless it brings its own.
func TestLoadOverride(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<|im_end|>", "chat_template": "checkpoint"}`), 0o644))
	jinja := filepath.Join(dir, "t.jinja")
	require.NoError(t, os.WriteFile(jinja, []byte("{{ eos_token }}"), 0o644))
	tpl, err := LoadOverride(dir, jinja)
	require.NoError(t, err)
	out, err := tpl.Render(Input{Messages: json.RawMessage(`[]`)})
	require.NoError(t, err)
	assert.Equal(t, "<|im_end|>", out)
	tpl, err = LoadOverride(dir, "")
	require.NoError(t, err)
	assert.Equal(t, "checkpoint", tpl.Source)
	_, err = LoadOverride(dir, filepath.Join(dir, "missing.jinja"))
	assert.Error(t, err)
}
