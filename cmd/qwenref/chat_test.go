package main

import (
	"os"
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

	// The one-shot flag a chat refuses is not in its help either.
	code, _, stderr = runCLI("chat", "--no-generation-prompt")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "flag provided but not defined: -no-generation-prompt")
	_, help, helpErr := runCLI("help", "chat")
	assert.NotContains(t, help+helpErr, "-no-generation-prompt")
	for _, f := range []string{"-reasoning", "-messages", "-continue-final-message"} {
		assert.Contains(t, help+helpErr, f)
	}
}

// chat --messages F --continue-final-message: the first reply continues
// the file's final assistant message, as Conversation.Continue does, and
// the chat goes on from there; a conversation that does not end with an
// assistant's message is refused before any weight is read.
func TestChatContinuesFinalMessage(t *testing.T) {
	dir := t.TempDir()
	msgs := dir + "/m.json"
	conv := `[{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "Yes, and"}]`
	require.NoError(t, os.WriteFile(msgs, []byte(conv), 0o644))

	m, tok, err := bundled.Model()
	require.NoError(t, err)
	tpl, err := chat.LoadFile(qwen3Tpl)
	require.NoError(t, err)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	list, _, err := chat.ParseConversation([]byte(conv))
	require.NoError(t, err)
	c, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, MaxNewTokens: 4, Messages: list})
	require.NoError(t, err)
	defer c.Close()
	var want strings.Builder
	_, err = c.Continue(func(s string) { want.WriteString(s) })
	require.NoError(t, err)
	want.WriteString("\n")
	_, err = c.Send("Go on.", func(s string) { want.WriteString(s) })
	require.NoError(t, err)
	want.WriteString("\n")

	code, stdout, stderr := runCLIStdin("Go on.\n", "chat", "--chat-template-file", qwen3Tpl, "--messages", msgs, "--continue-final-message", "-n", "4", "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want.String(), stdout)

	require.NoError(t, os.WriteFile(msgs, []byte(`[{"role": "user", "content": "Say yes."}]`), 0o644))
	for args, msg := range map[string]string{
		"--messages " + msgs: `the final message is the user's (role "user")`,
		"":                   "--continue-final-message continues the last message of --messages: there is no final message",
	} {
		code, _, stderr := runCLIStdin("", append([]string{"chat", "--continue-final-message"}, strings.Fields(args)...)...)
		assert.Equal(t, 1, code, args)
		assert.Contains(t, stderr, msg, args)
	}
}
