package generate_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/tensor"
)

// Stop ends a reply where it is, the turn is kept with the text so far,
// the caches hold exactly the prompt and the reply's tokens but the last,
// and the next turn's logits equal a fresh prefill of its render.
func TestConversationStopKeepsTheTurn(t *testing.T) {
	m, tok, tpl, be := chatSetup(t)
	drawn, stopAt := 0, 3
	var steps [][]float32
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, EOS: []int{-1},
		Stop: func() bool { return drawn >= stopAt },
		OnToken: func(_ int, logits []float32) bool {
			drawn++
			steps = append(steps, slices.Clone(logits))
			return true
		}})
	require.NoError(t, err)
	defer conv.Close()
	rep, err := conv.Send("Tell me a long story.", nil)
	require.NoError(t, err)
	assert.Equal(t, "interrupted", rep.StopReason)
	require.Len(t, rep.IDs, stopAt)
	assert.Equal(t, append(slices.Clone(rep.Prompt), rep.IDs[:stopAt-1]...), conv.IDs())
	text, err := conv.Render(nil, false)
	require.NoError(t, err)
	assert.Contains(t, text, rep.Text, "the partial reply is part of the conversation")

	drawn, stopAt, steps = 0, 2, nil
	rep2, err := conv.Send("Go on.", nil)
	require.NoError(t, err)
	fresh, err := m.Forward([][]int{rep2.Prompt}, be)
	require.NoError(t, err)
	v := m.Config.VocabSize
	p := len(rep2.Prompt) - 1
	e := tensor.CompareStage(steps[0], fresh.Data[p*v:(p+1)*v])
	assert.True(t, e.Within(tensor.GoldenTolerance), "the turn after a stop: %+v (%s)", e, rep2.Resume)

	// A stop before the first token drops the message; the caches stay
	// consistent with what they hold.
	stopAt = 0
	_, err = conv.Send("Never mind.", nil)
	assert.ErrorIs(t, err, generate.ErrInterrupted)
	text, err = conv.Render(nil, false)
	require.NoError(t, err)
	assert.NotContains(t, text, "Never mind.")
}

// With no MaxNewTokens a reply runs until its end-of-turn token, bounded
// by the context, and by the most tokens Check accepts.
func TestConversationReplyBoundedByContext(t *testing.T) {
	m, tok, tpl, be := chatSetup(t)
	conv, err := generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, EOS: []int{-1}, Context: 40})
	require.NoError(t, err)
	rep, err := conv.Send("Hi", nil)
	require.NoError(t, err)
	assert.Equal(t, "context", rep.StopReason)
	assert.Len(t, rep.IDs, 40-len(rep.Prompt))
	_, err = conv.Send("More", nil)
	assert.ErrorContains(t, err, "fill the context of 40")
	conv.Close()

	calls, limit := 0, 0
	conv, err = generate.NewConversation(m, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: be, EOS: []int{-1},
		Check: func(_, n int) error {
			if calls++; calls == 2 {
				limit = n - 1 + 7 // the second asks for the prompt and one token
			}
			if calls == 1 || n > limit {
				return assert.AnError
			}
			return nil
		}})
	require.NoError(t, err)
	defer conv.Close()
	rep, err = conv.Send("Hi", nil)
	require.NoError(t, err)
	assert.Len(t, rep.IDs, 7, "the budget is the most Check accepts")
}
