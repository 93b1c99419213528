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
// is true, "<|im_start|>assistant\n" follows. Nothing else is added.
//
// For system and user turns, and for assistant turns before the last user
// turn whose content holds no </think>, this is what Qwen3's Jinja chat
// template writes. The template differs elsewhere, and none of that is
// implemented here: it moves "<think>...</think>" reasoning out of
// assistant content (dropping it before the last user turn), writes
// "<think>\n{reasoning}\n</think>\n\n" before the content of an assistant
// turn after the last user turn when it has reasoning or is the final
// message, can add "<think>\n\n</think>\n\n" after the generation prompt
// (enable_thinking=false), and formats tools, tool calls and tool results.
//
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
