package chat

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const docsTemplate = `{% if documents %}{% for d in documents %}[{{ d.title }}: {{ d.text }}]{% endfor %}{% else %}no documents{% endif %}|{{ tools|length if tools else 'no tools' }}|{{ add_generation_prompt }}|{{ continue_final_message is defined }}`

// documents reach the template, given as Input.Documents or among the
// keyword arguments (chat_template_kwargs), as transformers passes
// apply_chat_template's documents; so do tools and add_generation_prompt
// given among the keyword arguments, and none of the parameters is left
// behind as a variable of its own.
func TestDocumentsAndParamsReachTemplate(t *testing.T) {
	tpl := MustParse(docsTemplate, "docs")
	docs := json.RawMessage(`[{"title": "A", "text": "x"}, {"title": "B", "text": "y"}]`)
	msgs := Messages(Message{Role: "user", Content: "hi"})
	out, err := tpl.Render(Input{Messages: msgs, Documents: docs})
	require.NoError(t, err)
	assert.Equal(t, "[A: x][B: y]|no tools|False|False", out)

	vars, gen, err := ParseVars([]byte(`{"documents": [{"title": "A", "text": "x"}], "tools": [{"name": "f"}], "continue_final_message": false}`))
	require.NoError(t, err)
	assert.Nil(t, gen)
	out, err = tpl.Render(Input{Messages: msgs, Vars: vars, AddGenerationPrompt: true})
	require.NoError(t, err)
	assert.Equal(t, "[A: x]|1|True|False", out)

	out, err = tpl.Render(Input{Messages: msgs, Vars: map[string]any{"add_generation_prompt": true}})
	require.NoError(t, err)
	assert.Equal(t, "no documents|no tools|True|False", out)
}

func TestParamsRefused(t *testing.T) {
	tpl := MustParse(docsTemplate, "docs")
	msgs := Messages(Message{Role: "user", Content: "hi"})
	for _, c := range []struct {
		in   Input
		want string
	}{
		{Input{Documents: json.RawMessage(`["a"]`)}, "documents[0]: want a document object, got a string"},
		{Input{Documents: json.RawMessage(`{"a": 1}`)}, "documents: want a JSON array of document objects"},
		{Input{Vars: map[string]any{"documents": "x"}}, "documents: want a JSON array"},
		{Input{Documents: json.RawMessage(`[]`), Vars: map[string]any{"documents": []any{}}}, "documents is given twice"},
		{Input{Tools: json.RawMessage(`[]`), Vars: map[string]any{"tools": nil}}, "tools is given twice"},
		{Input{Vars: map[string]any{"continue_final_message": "yes"}}, "continue_final_message must be true or false"},
		{Input{AddGenerationPrompt: true, ContinueFinalMessage: true}, "continue_final_message and add_generation_prompt are not compatible"},
		{Input{AddGenerationPrompt: true, Vars: map[string]any{"continue_final_message": true}}, "not compatible"},
	} {
		c.in.Messages = msgs
		_, err := tpl.Render(c.in)
		require.Error(t, err, c.want)
		assert.Contains(t, err.Error(), c.want)
	}
}

// continue_final_message cuts the text after the final message's content
// as transformers does: Qwen3's template without its <|im_end|>, the
// content's trailing whitespace where the template keeps it and not where
// it trims it, and the last text part of a content given as parts.
func TestContinueFinalMessage(t *testing.T) {
	q := qwen3Template(t)
	msgs := json.RawMessage(`[{"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "One, two,"}]`)
	out, err := q.Render(Input{Messages: msgs, ContinueFinalMessage: true, Vars: map[string]any{"enable_thinking": false}})
	require.NoError(t, err)
	full, err := q.Render(Input{Messages: msgs, Vars: map[string]any{"enable_thinking": false}})
	require.NoError(t, err)
	assert.Equal(t, full, out+"<|im_end|>\n")

	keep := MustParse(`{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}`, "keep")
	trim := MustParse(`{% for m in messages %}<{{ m.role }}>{{ m.content|trim }}</{{ m.role }}>{% endfor %}`, "trim")
	parts := MustParse(`{% for m in messages %}<{{ m.role }}>{% for p in m.content %}{{ p.text }}{% endfor %}</{{ m.role }}>{% endfor %}`, "parts")
	for _, c := range []struct {
		tpl       *Template
		msgs, out string
	}{
		{keep, `[{"role": "user", "content": "a"}, {"role": "assistant", "content": "so a "}]`, "<user>a</user><assistant>so a "},
		{trim, `[{"role": "user", "content": "a"}, {"role": "assistant", "content": "so a "}]`, "<user>a</user><assistant>so a"},
		{keep, `[{"role": "user", "content": "a"}, {"role": "assistant", "content": " so a"}]`, "<user>a</user><assistant> so a"},
		// the last occurrence, as transformers' rindex finds it: here in the closing tag
		{keep, `[{"role": "user", "content": "a"}, {"role": "assistant", "content": "a"}]`, "<user>a</user><assistant>a</assista"},
		{keep, `[{"role": "user", "content": "a"}]`, "<user>a"},
		{parts, `[{"role": "assistant", "content": [{"text": "x"}, {"type": "image"}, {"text": "y"}, {"type": "image"}]}]`, "<assistant>xy"},
	} {
		got, err := c.tpl.Render(Input{Messages: json.RawMessage(c.msgs), ContinueFinalMessage: true})
		require.NoError(t, err, c.msgs)
		assert.Equal(t, c.out, got, c.msgs)
	}
	for _, c := range []struct{ msgs, want string }{
		{`[{"role": "assistant", "content": [{"type": "image"}]}]`, "could not find any text to continue"},
		{`[{"role": "assistant"}]`, `has no "content"`},
		{`[{"role": "assistant", "content": null}]`, "not text"},
		{`[]`, "no messages"},
	} {
		_, err := keep.Render(Input{Messages: json.RawMessage(c.msgs), ContinueFinalMessage: true})
		require.Error(t, err, c.msgs)
		assert.Contains(t, err.Error(), c.want)
	}
	drop := MustParse(`{% for m in messages %}{{ m.content[:2] }}{% endfor %}`, "drop")
	_, err = drop.Render(Input{Messages: json.RawMessage(`[{"role": "assistant", "content": "hello"}]`), ContinueFinalMessage: true})
	assert.ErrorContains(t, err, "does not appear in the chat")
}
