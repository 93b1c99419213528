package generate_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// chatSetup is the bundled model and tokenizer with Qwen3's chat template,
// which drops the reasoning of earlier replies and reads enable_thinking.
func chatSetup(t *testing.T) (*model.Model, generate.TextCodec, *chat.Template, *model.Backend) {
	m, tok, err := bundled.Model()
	require.NoError(t, err)
	tpl, err := chat.LoadFile("../testdata/chat/qwen3-tokenizer_config.json")
	require.NoError(t, err)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	return m, tok, tpl, be
}

// Every turn's logits, from the kept caches, equal a fresh prefill of the
// whole rendered conversation (golden tolerance), whichever way the caches
// were reused: extended, restored from a saved state, or prefilled again.
func TestConversationMatchesFreshPrefill(t *testing.T) {
	m, tok, tpl, be := chatSetup(t)
	var steps [][]float32
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, MaxNewTokens: 4,
		OnToken: func(_ int, logits []float32) bool { steps = append(steps, slices.Clone(logits)); return true }})
	require.NoError(t, err)
	defer conv.Close()
	v := m.Config.VocabSize
	for _, c := range []struct{ line, resume string }{
		{"Hello there!", "extended"}, // from the empty caches
		{"/no-think", ""},
		{"What is the gated delta rule?", ""},
		// The last reply opened with an empty <think></think>, which the
		// template leaves out of earlier turns: resume from the saved state.
		{"And gated attention?", "restored"},
		{"/system Be brief.", ""},
		{"Why?", "prefilled"}, // the render's start changed
	} {
		before := conv.IDs()
		steps = nil
		var streamed strings.Builder
		res, err := conv.Line(c.line, func(s string) { streamed.WriteString(s) })
		require.NoError(t, err, c.line)
		if res.Reply == nil {
			assert.NotEmpty(t, res.Note, c.line)
			continue
		}
		rep := res.Reply
		assert.Equal(t, rep.Text, streamed.String(), "the stream is the reply's text")
		if c.resume != "" {
			assert.Equal(t, c.resume, rep.Resume, c.line)
		}
		assert.Equal(t, len(rep.Prompt), rep.Reused+rep.Prefilled)
		same := 0
		for same < len(before) && same < len(rep.Prompt) && before[same] == rep.Prompt[same] {
			same++
		}
		if same == len(before) && same < len(rep.Prompt) {
			assert.Equal(t, "extended", rep.Resume, "%s: the render extends the cache", c.line)
			assert.Equal(t, len(rep.Prompt)-len(before), rep.Prefilled, "%s: only the new tokens are prefilled", c.line)
		} else {
			assert.NotEqual(t, "extended", rep.Resume, c.line)
			assert.LessOrEqual(t, rep.Reused, same, c.line)
			assert.NotEmpty(t, rep.Note, c.line)
		}
		t.Logf("%q: %s, %d reused + %d prefilled; reply %q", c.line, rep.Resume, rep.Reused, rep.Prefilled, rep.Text)

		seq := append(slices.Clone(rep.Prompt), rep.IDs[:len(rep.IDs)-1]...)
		fresh, err := m.Forward([][]int{seq}, be)
		require.NoError(t, err)
		require.Len(t, steps, len(rep.IDs))
		for i, got := range steps {
			p := len(rep.Prompt) - 1 + i
			e := tensor.CompareStage(got, fresh.Data[p*v:(p+1)*v])
			assert.True(t, e.Within(tensor.GoldenTolerance), "%s: token %d: %+v", c.line, i, e)
		}
		assert.Equal(t, seq, conv.IDs(), "the caches hold the prompt and all but the last reply token")
	}
}

// A reply that re-renders as it was generated leaves a cache the next
// render extends: that turn prefills only its new tokens. Every token
// ending a reply keeps the replies empty, so the render is exact.
func TestConversationPrefillsOnlyNewTokens(t *testing.T) {
	m, tok, tpl, be := chatSetup(t)
	all := make([]int, m.Config.VocabSize)
	for i := range all {
		all[i] = i
	}
	charged := 0
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, EOS: all, System: "You are terse.",
		Check: func(prefill, _ int) error { charged = prefill; return nil }})
	require.NoError(t, err)
	defer conv.Close()
	prev := 0
	for i, line := range []string{"One?", "Two?", "Three?"} {
		rep, err := conv.Send(line, nil)
		require.NoError(t, err)
		assert.Equal(t, "eos", rep.StopReason)
		assert.Equal(t, "extended", rep.Resume, line)
		assert.Equal(t, prev, rep.Reused, line)
		assert.Equal(t, len(rep.Prompt)-prev, rep.Prefilled, line)
		assert.Equal(t, rep.Prefilled, charged, "%s: the memory check is charged the turn's prefill, not the conversation", line)
		if i > 0 {
			assert.Less(t, rep.Prefilled, len(rep.Prompt)/2, "a later turn prefills its own few tokens, not the conversation")
		}
		assert.Empty(t, rep.Note)
		prev = len(rep.Prompt)
	}
	require.NoError(t, conv.Reset())
	assert.Empty(t, conv.IDs())
	rep, err := conv.Send("Again?", nil)
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Reused, "after /reset the caches start empty, with no note")
	assert.Empty(t, rep.Note)
}

// The commands: /think on a template without the switch says so, an
// unknown command is named, // sends a slash, /exit ends.
func TestConversationCommands(t *testing.T) {
	m, tok, _, be := chatSetup(t)
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: chat.MustParse(chat.ChatML, "ChatML"), Codec: tok, Backend: be, MaxNewTokens: 2})
	require.NoError(t, err)
	defer conv.Close()
	res, err := conv.Line("/think", nil)
	require.NoError(t, err)
	assert.Contains(t, res.Note, "ChatML has no enable_thinking switch")
	res, _ = conv.Line("/bogus x", nil)
	assert.Contains(t, res.Note, "unknown command /bogus")
	res, _ = conv.Line("   ", nil)
	assert.Equal(t, generate.LineResult{}, res)
	res, err = conv.Line("//usr/bin?", nil)
	require.NoError(t, err)
	require.NotNil(t, res.Reply)
	text, err := conv.Render(nil, false)
	require.NoError(t, err)
	assert.Contains(t, text, "<|im_start|>user\n/usr/bin?<|im_end|>")
	res, _ = conv.Line("/exit", nil)
	assert.True(t, res.Exit)

	// A template that renders only with the generation prompt still chats
	// (no state is saved before the reply's opening, then).
	genOnly := chat.MustParse("{% if not add_generation_prompt %}{{ raise_exception('no') }}{% endif %}"+chat.ChatML, "gen-only")
	conv3, err := generate.NewConversation(m, generate.ConversationOptions{Template: genOnly, Codec: tok, Backend: be, MaxNewTokens: 1})
	require.NoError(t, err)
	_, err = conv3.Send("hi", nil)
	require.NoError(t, err)

	_, err = generate.NewConversation(m, generate.ConversationOptions{Codec: tok, Backend: be})
	assert.ErrorContains(t, err, "needs a template")
	conv2, err := generate.NewConversation(m, generate.ConversationOptions{Template: chat.MustParse(chat.ChatML, "ChatML"), Codec: tok, Backend: be,
		Check: func(_, n int) error { return assert.AnError }})
	require.NoError(t, err)
	_, err = conv2.Send("hi", nil)
	assert.ErrorIs(t, err, assert.AnError)
}
