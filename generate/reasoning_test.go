package generate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The reasoning is told apart from the answer however the stream splits
// the tags, in each mode, starting inside a block (Qwen3.5's generation
// prompt opens it) or not.
func TestReasoningFilter(t *testing.T) {
	const reply = "<think>\nLet me see.\n</think>\n\nFour."
	for _, c := range []struct {
		mode      string
		dim, open bool
		text      string
		want      string
	}{
		{ReasoningRaw, false, false, reply, reply},
		{ReasoningShow, false, false, reply, "Reasoning:\nLet me see.\n\nAnswer:\nFour."},
		{ReasoningShow, true, false, reply, "\x1b[2mLet me see.\n\x1b[22m\nFour."},
		{ReasoningHide, false, false, reply, "Four."},
		{ReasoningShow, false, true, "Hmm.</think>\n\nYes.", "Reasoning:\nHmm.\n\nAnswer:\nYes."},
		{ReasoningHide, true, true, "Hmm.</think>\n\nYes.", "Yes."},
		{ReasoningShow, false, false, "No tags, a < and a </thi", "No tags, a < and a </thi"},
		{ReasoningShow, false, false, "<think>\n\n</think>\n\nJust this.", "Just this."},
	} {
		for _, size := range []int{1, 2, 3, 5, 100} {
			var got strings.Builder
			f := newReasoningFilter(c.mode, c.dim, c.open, func(s string) { got.WriteString(s) })
			for i := 0; i < len(c.text); i += size {
				f.Add(c.text[i:min(i+size, len(c.text))])
			}
			f.Flush()
			assert.Equal(t, c.want, stripPieces(got.String(), c.dim), "%s dim=%v open=%v in pieces of %d", c.mode, c.dim, c.open, size)
		}
	}
	assert.True(t, OpensReasoning("<|im_start|>assistant\n<think>\n"))
	assert.False(t, OpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
	assert.Error(t, CheckReasoning("dim"))
}

// stripPieces joins the dimmed pieces a split stream writes one by one, so
// that every split compares with one expected text.
func stripPieces(s string, dim bool) string {
	if !dim {
		return s
	}
	return strings.ReplaceAll(s, "\x1b[22m\x1b[2m", "")
}
