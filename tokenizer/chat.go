package tokenizer

import "strings"

// Message is one turn of a chat: Role is "system", "user" or "assistant"
// (any string is accepted and written as is).
type Message struct {
	Role    string
	Content string
}

// ApplyChatTemplate renders messages in Qwen's ChatML format. Each message
// becomes exactly
//
//	<|im_start|>{Role}\n{Content}<|im_end|>\n
//
// in order, with Role and Content copied verbatim; if addGenerationPrompt
// is true, "<|im_start|>assistant\n" follows. For plain system, user and
// assistant turns this equals the text of Qwen3's Jinja chat template
// except that the template also strips <think>...</think> reasoning from
// assistant turns before the last user turn and can add an empty
// "<think>\n\n</think>\n\n" after the generation prompt (enable_thinking =
// false); tools, tool calls and reasoning handling are not implemented.
// Encode the result with Encode: the markers become their special ids.
func (t *Tokenizer) ApplyChatTemplate(messages []Message, addGenerationPrompt bool) string {
	var sb strings.Builder
	for _, m := range messages {
		sb.WriteString("<|im_start|>")
		sb.WriteString(m.Role)
		sb.WriteByte('\n')
		sb.WriteString(m.Content)
		sb.WriteString("<|im_end|>\n")
	}
	if addGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
	}
	return sb.String()
}
