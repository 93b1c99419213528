package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Qwen's split patterns, as their tokenizer.json files write them: Qwen2,
// 2.5 and 3, and Qwen3.5 (which adds marks, \p{M}, to words).
const (
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen35Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// A text may be cut between runes a and b, and each part split by one of
// Qwen's patterns on its own, with the same pieces as the whole gives,
// when
//
//   - a is a word character (\p{L}; for Qwen3.5 \p{L} or \p{M}) and b is
//     not, or
//   - a is a number (\p{N}), or
//   - a is \r or \n and b is a letter or a number.
//
// Why: the patterns have no look-behind or anchors, so matching from the
// cut on sees the same text either way, and no alternative matches the
// empty string. Every alternative that takes a word character takes only
// more word characters after it, and \p{N} takes one character and ends;
// so the match holding a ends at the cut, and no match attempt before the
// cut reads b except right after taking a, where b fails exactly as the
// end of the text does. For a newline, the first alternative that can
// take it, \s*[\r\n]+, succeeds from anywhere in its run of white space
// and stops at b (or the end); the look-ahead in \s+(?!\S), which would
// tell b from the end, is never tried there. TestSegmentsMatchWhole and
// FuzzSegments check the rule against splitting whole texts.
//
// cutFunc returns the length of the first segment of s: the first safe cut
// at or after byte target, or len(s).
type cutFunc func(s string, target int) int

// segmenterFor returns the cut rule for a first pre-tokenizer step, or nil
// when the step's output cannot be cut: another pattern, or a behavior
// that merges pieces across a cut.
func segmenterFor(pre []preStep) cutFunc {
	if len(pre) == 0 || pre[0].byteLevel {
		return nil
	}
	st := &pre[0]
	if st.behavior != behaviorIsolated && st.behavior != behaviorRemoved {
		return nil
	}
	var isWord func(rune) bool
	switch st.re.pattern {
	case qwen2Pattern:
		isWord = unicode.IsLetter
	case qwen35Pattern:
		isWord = func(r rune) bool { return unicode.IsLetter(r) || unicode.IsMark(r) }
	default:
		return nil
	}
	safe := func(a, b rune) bool {
		switch {
		case isWord(a):
			return !isWord(b)
		case unicode.IsNumber(a):
			return true
		case a == '\r' || a == '\n':
			return unicode.IsLetter(b) || unicode.IsNumber(b)
		}
		return false
	}
	return func(s string, target int) int {
		if target >= len(s) {
			return len(s)
		}
		i := max(target, 1)
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		a, _ := utf8.DecodeLastRuneInString(s[:i])
		for i < len(s) {
			b, n := utf8.DecodeRuneInString(s[i:])
			if safe(a, b) {
				return i
			}
			a, i = b, i+n
		}
		return len(s)
	}
}
