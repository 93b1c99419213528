package tokenizer

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// segmentAlphabet holds what Qwen's patterns treat differently: letters
// (ſ and the Kelvin sign fold to s and k), marks, digits of several kinds,
// apostrophes and contractions, white space of every class, punctuation,
// CJK and emoji.
var segmentAlphabet = []string{
	"a", "Z", "s", "ſ", "K", "é", "中", "ア", "\u0301", "\u0903", "1", "٣", "Ⅻ", "½",
	"'", "'s", "'LL", "'re", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085",
	"!", ".", ",", "-", "😀", "\u200d", "_", "$",
}

// splitWords returns the words of text after the first pre-tokenizer step
// of tok, cut into segments of at least seg bytes (0: not cut).
func splitWords(t testing.TB, tok *Tokenizer, text string, seg int) []string {
	t.Helper()
	cut := tok.cut
	require.NotNil(t, cut)
	var words []string
	runtime.LockOSThread() // the encoder's clock is this thread's
	defer runtime.UnlockOSThread()
	e := tok.newEncoder(len(text))
	st := &tok.pre[0]
	for len(text) > 0 {
		n := len(text)
		if seg > 0 {
			n = cut(text, seg)
		}
		err := st.re.split(e, 0, text[:n], st.behavior, st.invert, func(w string) error {
			words = append(words, w)
			return nil
		})
		require.NoError(t, err)
		text = text[n:]
	}
	return words
}

// qwenWithPattern is the Qwen3 tokenizer with another split pattern.
func qwenWithPattern(t testing.TB, pattern string) *Tokenizer {
	tok := *qwen3(t)
	re, err := compileRegex(pattern)
	require.NoError(t, err)
	tok.pre = append([]preStep(nil), tok.pre...)
	tok.pre[0].re = re
	tok.cut = segmenterFor(tok.pre)
	return &tok
}

// TestSegmentsMatchWhole cuts random texts at every safe place and checks
// that Qwen's patterns (Qwen3's and Qwen3.5's) split the parts into the
// same words as the whole.
func TestSegmentsMatchWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pattern := range []string{qwen2Pattern, qwen35Pattern} {
		tok := qwenWithPattern(t, pattern)
		for range 3000 {
			var sb strings.Builder
			for range 1 + rng.IntN(40) {
				sb.WriteString(segmentAlphabet[rng.IntN(len(segmentAlphabet))])
			}
			text := sb.String()
			require.Equal(t, splitWords(t, tok, text, 0), splitWords(t, tok, text, 1), "%q", text)
		}
	}
}

// FuzzSegments checks the cut rule on any text.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzSegments -fuzztime 60s
func FuzzSegments(f *testing.F) {
	f.Add("Hello, world's 12 \n\nx  y\r\n'S")
	f.Add("中文1\u0301a\u0301 ſ'ſ")
	qwen3 := qwenWithPattern(f, qwen2Pattern)
	qwen35 := qwenWithPattern(f, qwen35Pattern)
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 4096 {
			return
		}
		text = strings.ToValidUTF8(text, "")
		for _, tok := range []*Tokenizer{qwen3, qwen35} {
			assert.Equal(t, splitWords(t, tok, text, 0), splitWords(t, tok, text, 1), "%q", text)
		}
	})
}

// TestSegmenterFor: only Qwen's patterns, as the first step and with a
// behavior that keeps pieces apart, are cut.
func TestSegmenterFor(t *testing.T) {
	assert.NotNil(t, qwen3(t).cut)
	step := func(p string, b splitBehavior) []preStep {
		re, err := compileRegex(p)
		require.NoError(t, err)
		return []preStep{{re: re, behavior: b}}
	}
	assert.NotNil(t, segmenterFor(step(qwen35Pattern, behaviorRemoved)))
	assert.Nil(t, segmenterFor(step(qwen2Pattern, behaviorContiguous)))
	assert.Nil(t, segmenterFor(step(qwen2Pattern+"|x", behaviorIsolated)))
	assert.Nil(t, segmenterFor([]preStep{{byteLevel: true, useRegex: true}}))
	assert.Nil(t, segmenterFor(nil))

	cut := qwen3(t).cut
	assert.Equal(t, 3, cut("abc def", 1), "after the word")
	assert.Equal(t, 1, cut("12", 1), "after a digit")
	assert.Equal(t, 5, cut("\n\n  \nx", 1), "before the letter after a newline")
	assert.Equal(t, 5, cut("     ", 1), "no cut in white space")
	assert.Equal(t, 6, cut("中文", 1), "not inside a word, nor inside a rune")
	assert.Equal(t, 3, cut("中,", 1), "after a word, not inside a rune")
}
