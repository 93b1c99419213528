package serve

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reply parts as Qwen3's parsers part it, and fed a byte at a time
// the parts only grow and end where the whole reply's do.
func TestSplitter(t *testing.T) {
	cases := []struct {
		name                     string
		sp                       splitter
		text                     string
		reasoning, content, call string
	}{
		{"open think", splitter{think: true}, "let me see\n</think>\n\nIt is 4.", "let me see\n", "It is 4.", ""},
		{"think in the reply", splitter{}, "<think>hmm</think>\n\nFour.", "hmm", "Four.", ""},
		{"no think", splitter{}, "Four, <thinking> aside.", "", "Four, <thinking> aside.", ""},
		{"truncated reasoning", splitter{think: true}, "still thinking </thi", "still thinking </thi", "", ""},
		{"tool call", splitter{think: true, tools: true}, "use a tool</think>\n\nSure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
			"use a tool", "Sure.\n", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"},
		{"tool tag without tools", splitter{}, "a <tool_call> b", "", "a <tool_call> b", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ct, call := c.sp.split(c.text, true)
			assert.Equal(t, c.reasoning, r)
			assert.Equal(t, c.content, ct)
			assert.Equal(t, c.call, call)
			var pr, pc string
			for i := 1; i <= len(c.text); i++ {
				r, ct, _ := c.sp.split(c.text[:i], false)
				require.True(t, len(r) >= len(pr) && r[:len(pr)] == pr, "reasoning shrank at %d: %q then %q", i, pr, r)
				require.True(t, len(ct) >= len(pc) && ct[:len(pc)] == pc, "content shrank at %d: %q then %q", i, pc, ct)
				pr, pc = r, ct
			}
			assert.True(t, len(c.reasoning) >= len(pr) && c.reasoning[:len(pr)] == pr)
			assert.True(t, len(c.content) >= len(pc) && c.content[:len(pc)] == pc)
		})
	}
}

func TestParseToolCalls(t *testing.T) {
	calls := parseToolCalls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"now\"}</tool_call>")
	require.Len(t, calls, 2)
	f := calls[0]["function"].(map[string]any)
	assert.Equal(t, "get_weather", f["name"])
	var args map[string]string
	require.NoError(t, json.Unmarshal([]byte(f["arguments"].(string)), &args))
	assert.Equal(t, "Paris", args["city"])
	assert.Equal(t, "{}", calls[1]["function"].(map[string]any)["arguments"])
	assert.Equal(t, "function", calls[0]["type"])
	assert.NotEqual(t, calls[0]["id"], calls[1]["id"])
	assert.Nil(t, parseToolCalls("<tool_call>not json</tool_call>"))
	assert.Nil(t, parseToolCalls("<tool_call>{\"arguments\": {}}</tool_call>"), "a call needs a name")
}
