package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A busy loop: the cost of one loop iteration, the smallest unit of work.
func BenchmarkBusyLoop(b *testing.B) {
	tpl := MustParse(`{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}`, "b")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Render(Input{Messages: Messages()}); err != nil {
			b.Fatal(err)
		}
	}
}

// longConversation is n turns of user, assistant with a tool call, and
// tool response, each turn about 1 KB.
func longConversation(n int) json.RawMessage {
	var msgs []any
	msgs = append(msgs, map[string]any{"role": "system", "content": "You are a careful assistant."})
	text := strings.Repeat("Some words of a message. ", 40)
	for i := range n {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i, text)},
			map[string]any{"role": "assistant", "content": text, "reasoning_content": "thinking " + text,
				"tool_calls": []any{map[string]any{"type": "function", "function": map[string]any{"name": "search", "arguments": map[string]any{"query": text, "n": i, "x": nil}}}}},
			map[string]any{"role": "tool", "content": text})
	}
	b, _ := json.Marshal(msgs)
	return b
}

// The Qwen3.5-style template on 100 turns (300 messages, ~400 KB): the
// cost of rendering a long real conversation.
func BenchmarkQwen35StyleLongConversation(b *testing.B) {
	tpl, err := LoadFile("../testdata/chat/qwen35-style.jinja")
	if err != nil {
		b.Fatal(err)
	}
	msgs := longConversation(100)
	tools := json.RawMessage(`[{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]`)
	b.SetBytes(int64(len(msgs)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tpl.Render(Input{Messages: msgs, Tools: tools, AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// Parsing the Qwen3.5-style template.
func BenchmarkParseQwen35Style(b *testing.B) {
	tpl, err := LoadFile("../testdata/chat/qwen35-style.jinja")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(tpl.Source, "b"); err != nil {
			b.Fatal(err)
		}
	}
}
