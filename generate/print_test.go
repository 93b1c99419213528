package generate_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/generate"
)

// A Printer fed a scripted reply token by token (reasoning, answer, then
// the end-of-turn token) shows it as Chat does in each reasoning mode,
// starting inside the reasoning block when the prompt opened it, and
// without a mode writes the text as generated, end-of-turn token included.
func TestPrinterShowsReasoningApart(t *testing.T) {
	m, tok, err := bundled.Model()
	require.NoError(t, err)
	eos := m.Config.EOSTokenIDs
	require.NotEmpty(t, eos)
	script := func(text string) []int {
		ids, err := tok.Encode(text)
		require.NoError(t, err)
		return append(ids, eos[0])
	}
	end, err := tok.Decode(eos[:1])
	require.NoError(t, err)
	for _, c := range []struct {
		reply, mode string
		open, dim   bool
		want        string
	}{
		{"<think>\nLet me see.\n</think>\n\nFour.", generate.ReasoningShow, false, false, "Reasoning:\nLet me see.\n\nAnswer:\nFour.\n"},
		{"<think>\nLet me see.\n</think>\n\nFour.", generate.ReasoningHide, false, false, "Four.\n"},
		{"<think>\nLet me see.\n</think>\n\nFour.", generate.ReasoningRaw, false, false, "<think>\nLet me see.\n</think>\n\nFour.\n"},
		{"<think>\nLet me see.\n</think>\n\nFour.", "", false, false, "<think>\nLet me see.\n</think>\n\nFour." + end + "\n"},
		{"Hmm, 2+2.\n</think>\n\nFour.", generate.ReasoningShow, true, false, "Reasoning:\nHmm, 2+2.\n\nAnswer:\nFour.\n"},
		{"Hmm, 2+2.\n</think>\n\nFour.", generate.ReasoningHide, true, true, "Four.\n"},
		{"Hmm, 2+2.\n</think>\n\nFour.", generate.ReasoningShow, true, true, "\x1b[2mHmm, 2+2.\n\x1b[22m\nFour.\n"},
	} {
		var out strings.Builder
		p := generate.NewPrinter(tok, &out, generate.PrintOptions{Reasoning: c.mode, Dim: c.dim, InReasoning: c.open, EOS: eos})
		for _, id := range script(c.reply) {
			assert.True(t, p.Token(id, nil))
		}
		require.NoError(t, p.Close())
		got := strings.ReplaceAll(out.String(), "\x1b[22m\x1b[2m", "") // dimmed pieces joined
		assert.Equal(t, c.want, got, "%q in mode %q, open=%v dim=%v", c.reply, c.mode, c.open, c.dim)
	}
}
