package chat

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python's str methods on Go strings. Python indexes strings by code
// point, so positions here are code point counts, not byte offsets.

// pyIsSpace is Python's str.isspace for one character: what str.split()
// and str.strip() treat as whitespace (more than unicode.IsSpace: also the
// separators U+001C–U+001F).
func pyIsSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// isLineBreak is what str.splitlines splits on.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// runeLen is len(s) in Python.
func runeLen(s string) int {
	if isASCII(s) {
		return len(s)
	}
	return utf8.RuneCountInString(s)
}

// byteOffset is the byte offset of code point i of s (0 ≤ i ≤ len).
func byteOffset(s string, i int) int {
	if isASCII(s) {
		return i
	}
	off := 0
	for range i {
		_, n := utf8.DecodeRuneInString(s[off:])
		off += n
	}
	return off
}

// pyStrip is str.strip/lstrip/rstrip: chars nil strips whitespace.
func pyStrip(s string, chars *string, left, right bool) string {
	in := pyIsSpace
	if chars != nil {
		set := *chars
		in = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// pySplit is str.split(sep, maxsplit): sep nil splits on runs of
// whitespace and drops empty strings. It hands each piece to emit in order
// and builds nothing itself, so a caller can count the pieces in a first
// pass and charge the list before a second pass builds it.
func pySplit(s string, sep *string, maxsplit int, emit func(string)) error {
	n := 0
	if sep == nil {
		i := 0
		for {
			for i < len(s) {
				r, size := utf8.DecodeRuneInString(s[i:])
				if !pyIsSpace(r) {
					break
				}
				i += size
			}
			if i == len(s) {
				return nil
			}
			if maxsplit >= 0 && n == maxsplit {
				emit(s[i:])
				return nil
			}
			j := i
			for j < len(s) {
				r, size := utf8.DecodeRuneInString(s[j:])
				if pyIsSpace(r) {
					break
				}
				j += size
			}
			emit(s[i:j])
			n++
			i = j
		}
	}
	if *sep == "" {
		return errors.New("empty separator")
	}
	for maxsplit < 0 || n < maxsplit {
		i := strings.Index(s, *sep)
		if i < 0 {
			break
		}
		emit(s[:i])
		n++
		s = s[i+len(*sep):]
	}
	emit(s)
	return nil
}

// pyRSplit is str.rsplit(sep, maxsplit). It hands the pieces to emit from
// the last to the first.
func pyRSplit(s string, sep *string, maxsplit int, emit func(string)) error {
	n := 0
	if sep == nil {
		j := len(s)
		for {
			for j > 0 {
				r, size := utf8.DecodeLastRuneInString(s[:j])
				if !pyIsSpace(r) {
					break
				}
				j -= size
			}
			if j == 0 {
				return nil
			}
			if maxsplit >= 0 && n == maxsplit {
				emit(s[:j])
				return nil
			}
			i := j
			for i > 0 {
				r, size := utf8.DecodeLastRuneInString(s[:i])
				if pyIsSpace(r) {
					break
				}
				i -= size
			}
			emit(s[i:j])
			n++
			j = i
		}
	}
	if *sep == "" {
		return errors.New("empty separator")
	}
	for maxsplit < 0 || n < maxsplit {
		i := strings.LastIndex(s, *sep)
		if i < 0 {
			break
		}
		emit(s[i+len(*sep):])
		n++
		s = s[:i]
	}
	emit(s)
	return nil
}

// pySplitLines is str.splitlines(keepends), handing each line to emit.
func pySplitLines(s string, keepends bool, emit func(string)) {
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isLineBreak(r) {
			i += n
			continue
		}
		end := i + n
		if r == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		if keepends {
			emit(s[start:end])
		} else {
			emit(s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		emit(s[start:])
	}
}

// pyReplace is str.replace(old, new, count); an empty old inserts new
// around every character, as Python does. The caller checks the size
// (replacedLen) first.
func pyReplace(s, old, new string, count int) string {
	if old != "" {
		return strings.Replace(s, old, new, count)
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if count >= 0 && n >= count {
			b.WriteRune(r)
			continue
		}
		b.WriteString(new)
		b.WriteRune(r)
		n++
	}
	if count < 0 || n < count {
		b.WriteString(new)
	}
	return b.String()
}

// replacedLen is the byte length pyReplace will produce.
func replacedLen(s, old, new string, count int) int {
	var n int
	if old == "" {
		n = runeLen(s) + 1
	} else {
		n = strings.Count(s, old)
	}
	if count >= 0 && count < n {
		n = count
	}
	return len(s) + n*(len(new)-len(old))
}

// pyCount is str.count(sub): non-overlapping, and len+1 for "".
func pyCount(s, sub string) int {
	if sub == "" {
		return runeLen(s) + 1
	}
	return strings.Count(s, sub)
}

// pyFind is str.find (or rfind): a code point index, or -1.
func pyFind(s, sub string, last bool) int {
	var i int
	if last {
		i = strings.LastIndex(s, sub)
	} else {
		i = strings.Index(s, sub)
	}
	if i < 0 {
		return -1
	}
	return runeLen(s[:i])
}

// padLen is how many fill characters center/ljust/rjust add.
func padLen(s string, width int) int { return max(width-runeLen(s), 0) }

// pyCenter is str.center(width, fill): the extra character goes left when
// the margin and the width are both odd, as CPython does.
func pyCenter(s string, width int, fill rune) string {
	marg := padLen(s, width)
	if marg == 0 {
		return s
	}
	left := marg/2 + (marg & width & 1)
	f := string(fill)
	return strings.Repeat(f, left) + s + strings.Repeat(f, marg-left)
}

func pyJust(s string, width int, fill rune, left bool) string {
	pad := strings.Repeat(string(fill), padLen(s, width))
	if left {
		return s + pad
	}
	return pad + s
}

// pyZfill is str.zfill(width).
func pyZfill(s string, width int) string {
	pad := padLen(s, width)
	if pad == 0 {
		return s
	}
	sign := ""
	if s != "" && (s[0] == '+' || s[0] == '-') {
		sign, s = s[:1], s[1:]
	}
	return sign + strings.Repeat("0", pad) + s
}

// isCased is Unicode's Cased property, which Python's case methods use.
func isCased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// isCaseIgnorable approximates Unicode's Case_Ignorable property: marks,
// format characters, modifiers, and the apostrophes and dots inside words.
func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '^', '`', 0xb7, 0x2018, 0x2019, 0x2024, 0x2027, 0xfe13, 0xfe52, 0xfe55, 0xff07, 0xff0e, 0xff1a:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// finalSigma reports whether the Σ at rs[i] ends a word, where Python's
// lower() writes ς instead of σ.
func finalSigma(rs []rune, i int) bool {
	j := i - 1
	for j >= 0 && isCaseIgnorable(rs[j]) {
		j--
	}
	if j < 0 || !isCased(rs[j]) {
		return false
	}
	k := i + 1
	for k < len(rs) && isCaseIgnorable(rs[k]) {
		k++
	}
	return k == len(rs) || !isCased(rs[k])
}

func writeUpper(b *strings.Builder, r rune) {
	if m, ok := upperSpecial[r]; ok {
		b.WriteString(m)
		return
	}
	b.WriteRune(unicode.ToUpper(r))
}

func writeTitle(b *strings.Builder, r rune) {
	if m, ok := titleSpecial[r]; ok {
		b.WriteString(m)
		return
	}
	b.WriteRune(unicode.ToTitle(r))
}

func writeLower(b *strings.Builder, rs []rune, i int) {
	r := rs[i]
	switch {
	case r == 'Σ' && finalSigma(rs, i):
		b.WriteRune('ς')
	case r == 0x130:
		b.WriteString("i\u0307")
	default:
		b.WriteRune(unicode.ToLower(r))
	}
}

// pyUpper is str.upper, with the full mappings (ß → SS).
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	var b strings.Builder
	for _, r := range s {
		writeUpper(&b, r)
	}
	return b.String()
}

// pyLower is str.lower, with final sigma and İ → i̇.
func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	rs := []rune(s)
	var b strings.Builder
	for i := range rs {
		writeLower(&b, rs, i)
	}
	return b.String()
}

// pyCapitalize is str.capitalize: the first character title-cased, the
// rest lower-cased.
func pyCapitalize(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if i == 0 {
			writeTitle(&b, r)
		} else {
			writeLower(&b, rs, i)
		}
	}
	return b.String()
}

// pyTitle is str.title: each run of cased characters starts title-cased,
// the rest of it lower-cased.
func pyTitle(s string) string {
	rs := []rune(s)
	var b strings.Builder
	prevCased := false
	for i, r := range rs {
		if prevCased {
			writeLower(&b, rs, i)
		} else {
			writeTitle(&b, r)
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// pySwapcase is str.swapcase.
func pySwapcase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		switch {
		case unicode.IsUpper(r):
			writeLower(&b, rs, i)
		case unicode.IsLower(r):
			writeUpper(&b, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// chargeCase charges what upper, lower, title and the others build from s
// before they build it: the result, at most three times longer (the
// longest full case mapping is three characters of up to 3 bytes for one),
// and the rune copy of s that most of them walk.
func (r *renderer) chargeCase(s string, line int) error {
	if err := r.scratch(4*len(s), line); err != nil {
		return err
	}
	return r.charge(3*len(s), line)
}

// pyIsX is str.isupper/islower: some cased character, and all of them of
// that case.
func pyIsCase(s string, upper bool) bool {
	cased := false
	for _, r := range s {
		if upper && (unicode.IsLower(r) || unicode.IsTitle(r)) || !upper && (unicode.IsUpper(r) || unicode.IsTitle(r)) {
			return false
		}
		if isCased(r) {
			cased = true
		}
	}
	return cased
}

// pyIsAll is str.isalpha/isdigit/…: non-empty and every character passes.
func pyIsAll(s string, pass func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !pass(r) {
			return false
		}
	}
	return true
}

func isPyAlpha(r rune) bool   { return unicode.IsLetter(r) }
func isPyDecimal(r rune) bool { return unicode.Is(unicode.Nd, r) }
func isPyDigit(r rune) bool   { return unicode.Is(unicode.Nd, r) || unicode.Is(pyDigitExtra, r) }
func isPyNumeric(r rune) bool { return isPyDigit(r) || unicode.Is(pyNumericExtra, r) }
func isPyAlnum(r rune) bool   { return isPyAlpha(r) || isPyNumeric(r) }

// pyTitleFilter is Jinja's title filter (not str.title): words start after
// runs of whitespace, -, (, {, [ and <.
func pyTitleFilter(s string) string {
	var b strings.Builder
	start := true
	sepRun := false
	wordStart := 0
	rs := []rune(s)
	flushWord := func(end int) {
		if wordStart < end {
			w := rs[wordStart:end]
			var u strings.Builder
			writeUpper(&u, w[0])
			b.WriteString(u.String())
			b.WriteString(pyLower(string(w[1:])))
		}
	}
	for i, r := range rs {
		isSep := pyIsSpace(r) || strings.ContainsRune("-({[<", r)
		switch {
		case isSep && !sepRun:
			if !start {
				flushWord(i)
			}
			sepRun = true
			b.WriteRune(r)
		case isSep:
			b.WriteRune(r)
		case sepRun || start:
			sepRun, start = false, false
			wordStart = i
		}
	}
	if !sepRun && !start {
		flushWord(len(rs))
	}
	return b.String()
}
