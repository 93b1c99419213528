package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A keyword argument that is the conversation itself is refused, as
// transformers raises on it, not silently overridden by the messages.
func TestParseVarsRefusesTheConversation(t *testing.T) {
	for _, k := range []string{"messages", "conversation"} {
		_, _, err := ParseVars([]byte(`{"` + k + `": 5}`))
		assert.ErrorContains(t, err, `"`+k+`" is the conversation itself`)
	}
	vars, _, err := ParseVars([]byte(`{"enable_thinking": false}`))
	require.NoError(t, err)
	assert.Len(t, vars, 1)
}

// The conversation cap counts the keyword arguments as written: a value
// of 3 million '<' is 3 MB, not the 18 MB of Go's HTML-escaping encoding.
func TestConversationCapOnWhatWasWritten(t *testing.T) {
	tpl := MustParse(ChatML, "chatml")
	big := json.RawMessage(`"` + strings.Repeat("<", 3_000_000) + `"`)
	_, err := tpl.Render(Input{Messages: Messages(Message{"user", "x"}), Vars: map[string]any{"note": big}})
	assert.NoError(t, err)
	over := json.RawMessage(`"` + strings.Repeat("<", MaxInputBytes) + `"`)
	_, err = tpl.Render(Input{Messages: Messages(Message{"user", "x"}), Vars: map[string]any{"note": over}})
	assert.ErrorIs(t, err, ErrLimit)
}
