package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prompt's --documents reaches the template as documents, and
// --continue-final-message ends the text after the final message's content
// (Qwen3's template: no <|im_end|>, no generation prompt); the same given
// in --chat-template-kwargs does the same, and bad combinations are refused.
func TestPromptDocumentsAndContinue(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../testdata/chat/qwen3-tokenizer_config.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644))
	tpl := filepath.Join(dir, "docs.jinja")
	require.NoError(t, os.WriteFile(tpl, []byte("{% for d in documents %}[{{ d.title }}]{% endfor %}{{ messages[-1].content }}"), 0o644))
	docs := filepath.Join(dir, "docs.json")
	require.NoError(t, os.WriteFile(docs, []byte(`[{"title": "A", "text": "x"}]`), 0o644))
	msgs := filepath.Join(dir, "m.json")
	require.NoError(t, os.WriteFile(msgs, []byte(`[{"role": "user", "content": "Count."}, {"role": "assistant", "content": "One, two,"}]`), 0o644))

	code, stdout, stderr := runCLI("prompt", "--model", dir, "--chat-template-file", tpl, "--documents", docs, "--prompt", "hi")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "[A]hi", stdout)
	code, stdout, stderr = runCLI("prompt", "--model", dir, "--chat-template-file", tpl, "--chat-template-kwargs", `{"documents": [{"title": "B"}]}`, "--prompt", "hi")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "[B]hi", stdout)

	want := "<|im_start|>user\nCount.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOne, two,"
	for _, extra := range [][]string{{"--continue-final-message"}, {"--chat-template-kwargs", `{"continue_final_message": true}`}} {
		code, stdout, stderr = runCLI(append([]string{"prompt", "--model", dir, "--messages", msgs, "--no-think"}, extra...)...)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, want, stdout, extra)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--continue-final-message", "--chat-template-kwargs", `{"add_generation_prompt": true}`}, 1, "not compatible"},
		{[]string{"--documents", msgs + ".missing"}, 1, "--documents"},
		{[]string{"--documents", tpl, "--prompt", "x"}, 1, "want a JSON array of document objects"},
		{[]string{"--documents", docs, "--chat-template-kwargs", `{"documents": []}`}, 2, "not both"},
	} {
		code, _, stderr := runCLI(append([]string{"prompt", "--model", dir, "--messages", msgs}, c.args...)...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, c.args)
	}
}
