package generate_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/generate"
)

// Continue renders what transformers renders with continue_final_message
// (the golden render of the conversation without a generation prompt, cut
// after the final message's content: no <|im_end|>), the reply extends
// that message's content and keeps its other fields, and a conversation
// that does not end with an assistant's message is refused.
func TestConversationContinue(t *testing.T) {
	m, tok, tpl, be := chatSetup(t)
	var cases struct {
		Cases []struct {
			Name     string
			Messages []json.RawMessage
		}
	}
	var exp struct{ Cases []struct{ Name, Text string } }
	for p, v := range map[string]any{"../testdata/chat/cases.json": &cases, "../testdata/chat/expected.json": &exp} {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, v))
	}
	golden := map[string]string{}
	for _, c := range exp.Cases {
		golden[c.Name] = c.Text
	}
	n := 0
	for _, c := range cases.Cases {
		if c.Name != "reasoning-content-field" && c.Name != "final-assistant-with-think" {
			continue
		}
		n++
		want, ok := strings.CutSuffix(golden[c.Name], "<|im_end|>\n")
		require.True(t, ok, c.Name)
		wantIDs, err := tok.Encode(want)
		require.NoError(t, err)
		conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, MaxNewTokens: 3, EOS: []int{-1}, Messages: c.Messages})
		require.NoError(t, err)
		rep, err := conv.Continue(nil)
		require.NoError(t, err, c.Name)
		assert.Equal(t, wantIDs, rep.Prompt, c.Name)
		text, err := conv.Render(nil, false)
		require.NoError(t, err)
		assert.Equal(t, want+rep.Text+"<|im_end|>\n", text, "%s: the reply ends the final message", c.Name)
		_, err = conv.Send("Thanks.", nil)
		require.NoError(t, err, "the chat goes on")
		conv.Close()
	}
	require.Equal(t, 2, n)

	user, _ := json.Marshal([]map[string]string{{"role": "user", "content": "Hi"}})
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(user, &msgs))
	assert.ErrorContains(t, generate.CheckContinuable(msgs), `the final message is the user's (role "user")`)
	assert.ErrorContains(t, generate.CheckContinuable(nil), "no final message")
	assert.ErrorContains(t, generate.CheckContinuable([]json.RawMessage{json.RawMessage(`{"role": "assistant", "content": [{"type": "text", "text": "x"}]}`)}), "not a string")
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, MaxNewTokens: 3, Messages: msgs})
	require.NoError(t, err)
	defer conv.Close()
	_, err = conv.Continue(nil)
	assert.ErrorContains(t, err, "continue_final_message: the final message is the user's")
}
