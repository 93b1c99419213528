package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

// chatSession has a turn that extends the caches, one that resumes from a
// saved state (the template drops the empty think block of the reply
// before), one that prefills everything (a new system message), commands,
// and a line after /exit that is never read.
const (
	chatSession  = "Hello\n/no-think\nWhat now?\nAnd then?\n/system Be brief.\nBye\n/exit\nnever sent\n"
	qwen3Tpl     = "../../testdata/chat/qwen3-tokenizer_config.json"
	chatReplyMax = "8"
)

// wantChat is what generate.Conversation replies to the session's lines.
func wantChat(t *testing.T, lines string) string {
	m, tok, err := bundled.Model()
	require.NoError(t, err)
	tpl, err := chat.LoadFile(qwen3Tpl)
	require.NoError(t, err)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, MaxNewTokens: 8})
	require.NoError(t, err)
	var out strings.Builder
	for _, line := range strings.Split(lines, "\n") {
		res, err := conv.Line(line, func(s string) { out.WriteString(s) })
		require.NoError(t, err)
		if res.Reply != nil {
			out.WriteString("\n")
		}
		if res.Exit {
			break
		}
	}
	return out.String()
}

// qwenref chat streams exactly the conversation's replies to stdout, one
// per message, and says on stderr how each turn reused the caches.
func TestChatCommand(t *testing.T) {
	want := wantChat(t, chatSession)
	code, stdout, stderr := runCLIStdin(chatSession, "chat", "--chat-template-file", qwen3Tpl, "--max-new-tokens", chatReplyMax)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, stdout)
	for _, s := range []string{"chat: thinking off", "resuming from the state saved at token", "prefilling all", "chat: system message set"} {
		assert.Equal(t, 1, strings.Count(stderr, s), "%q in %s", s, stderr)
	}
	assert.Equal(t, 4, strings.Count(stderr, " prompt tokens, "), "four messages; the line after /exit is not read")

	// End of input ends the chat; --quiet keeps the commands' notes only.
	code, stdout, stderr = runCLIStdin("Hello\n/no-think\nWhat now?", "chat", "--chat-template-file", qwen3Tpl, "-max-new-tokens", chatReplyMax, "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, wantChat(t, "Hello\n/no-think\nWhat now?"), stdout)
	assert.Contains(t, stderr, "chat: thinking off")
	assert.NotContains(t, stderr, "prompt tokens")

	// A turn that fails is reported and dropped; the chat goes on.
	code, stdout, stderr = runCLIStdin("Hello\nAgain\n", "chat", "--max-new-tokens", "4", "--max-memory", "0.0001")
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, 2, strings.Count(stderr, "chat: 1×13 tokens (9 at once) need"), stderr)
	assert.Empty(t, stdout)
	// A note that repeats what was typed escapes its terminal controls.
	code, _, stderr = runCLIStdin("/\x1b]0;pwned\x07bogus\n", "chat", "--chat-template-file", qwen3Tpl, "--max-new-tokens", "1")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, `unknown command /\x1b]0;pwned\abogus`)
	assert.NotContains(t, stderr, "\x1b")

	// The one-shot flags a chat refuses are not in its help either.
	code, _, stderr = runCLI("chat", "--messages", "m.json")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "flag provided but not defined: -messages")
	_, help, helpErr := runCLI("help", "chat")
	for _, f := range []string{"-messages", "-no-generation-prompt"} {
		assert.NotContains(t, help+helpErr, f)
	}
	assert.Contains(t, help+helpErr, "-reasoning")
}
