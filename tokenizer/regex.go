package tokenizer

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/dlclark/regexp2/syntax"

	"github.com/qwenref/qwenref/internal/safeio"
)

// regex wraps a regexp2 pattern so that it finds the same matches as the
// Oniguruma engine HF uses. Go's regexp cannot be used: tokenizer patterns
// rely on look-ahead (`\s+(?!\S)`).
type regex struct {
	re      matchFinder // with regexp2's wall-clock timeout at matchTimeout
	pattern string      // as written in the file, for messages

	mu     sync.Mutex
	longer [maxRetries]matchFinder // the same with 4, 16, ... times that timeout, made when needed
}

// matchFinder is what scan needs of a compiled pattern: a *regexp2.Regexp,
// or in tests a stand-in.
type matchFinder interface {
	FindRunesMatchStartingAt(r []rune, startAt int) (*regexp2.Match, error)
}

// MatchTimeout bounds one regexp match of a pre-tokenizer pattern: it may
// use this much CPU time plus MatchTimePerRune for each character from
// where it starts to the end of the text. A tokenizer.json may carry a
// pattern that backtracks exponentially (`(a+)+$`); regexp2 is a
// backtracking engine, so without a bound such a pattern hangs Encode.
// Qwen's pattern takes microseconds per match, and about 0.1 µs per
// character of one long word (see docs/limits.md). The whole Encode call
// is bounded as well, by EncodeTimeLimit.
const MatchTimeout = 2 * time.Second

// MatchTimePerRune is what one match may use per character of the text it
// may reach, on top of MatchTimeout: ten times what Qwen's pattern takes
// over one long word.
const MatchTimePerRune = time.Microsecond

// matchTimeout is MatchTimeout, lowered by fuzz targets and tests.
var matchTimeout = MatchTimeout

// maxRetries is how many times a match regexp2 stopped early (its clock is
// wall time: a loaded machine, a long word) is run again, each time with a
// four times longer timeout, before Encode gives up.
const maxRetries = 6

// compileRegex compiles an Oniguruma-style pattern from a tokenizer.json.
func compileRegex(pattern string) (*regex, error) {
	re, err := regexp2.Compile(foldCaseLiterals(pattern), regexp2.None)
	if err != nil {
		// regexp2's message quotes the whole (rewritten) pattern raw.
		msg := err.Error()
		var se *syntax.Error
		if errors.As(err, &se) {
			msg = se.Code.String()
			if len(se.Args) > 0 {
				msg = fmt.Sprintf(msg, se.Args...)
			}
		}
		return nil, fmt.Errorf("%s: %s", safeio.Quote(pattern), safeio.Clean(msg))
	}
	if re.RightToLeft() {
		return nil, fmt.Errorf("right-to-left matching is not supported")
	}
	re.MatchTimeout = matchTimeout
	return &regex{re: re, pattern: pattern}, nil
}

// span is a piece of a string in byte offsets; match tells a pattern match
// from the text between matches.
type span struct {
	start, end int
	match      bool
}

// scan covers s with alternating match and non-match spans, passing each
// to fn in order, like HF's Pattern::find_matches over the onig crate's
// find_iter: an empty match is dropped when it ends where the previous
// match ended (and the search then moves on by one character). buf is
// scratch space for s as runes, which regexp2 matches on.
func (r *regex) scan(e *encoder, s string, buf *[]rune, fn func(span) error) error {
	if s == "" {
		return fn(span{0, 0, false})
	}
	runes := (*buf)[:0]
	if n := utf8.RuneCountInString(s); cap(runes) < n {
		runes = make([]rune, 0, n) // exact: a piece may be the whole text
	}
	for _, c := range s {
		runes = append(runes, c)
	}
	*buf = runes
	// Byte offsets of rune indices, found walking forward: every index
	// asked for is at least the one before.
	ri, bi := 0, 0
	off := func(k int) int {
		for ; ri < k; ri++ {
			bi += utf8.RuneLen(runes[ri])
		}
		return bi
	}
	prev, lastEnd, lastMatchEnd := 0, 0, -1
	for lastEnd <= len(runes) {
		m, err := r.find(e, runes, lastEnd)
		if err != nil {
			return err
		}
		if m == nil {
			break
		}
		st, en := m.Index, m.Index+m.Length
		if st == en && en == lastMatchEnd {
			lastEnd++
			continue
		}
		lastEnd, lastMatchEnd = en, en
		if prev != st {
			if err := fn(span{off(prev), off(st), false}); err != nil {
				return err
			}
		}
		if err := fn(span{off(st), off(en), true}); err != nil {
			return err
		}
		prev = en
	}
	if prev != len(runes) {
		return fn(span{off(prev), len(s), false})
	}
	return nil
}

// find runs one match from rune at, within the match's and the Encode
// call's limits, both on CPU time (threadCPU). regexp2 can only stop a
// match by its own timeout, read from a clock that a background goroutine
// advances by the wall clock; on a loaded machine, or over a long word, it
// fires on a match that has used little CPU time. Such a match is run
// again with a four times longer timeout; only one that used its CPU
// limit is refused as backtracking. (regexp2's errors quote the whole
// text; none is passed on.)
func (r *regex) find(e *encoder, runes []rune, at int) (*regexp2.Match, error) {
	limit := matchTimeout + time.Duration(len(runes)-at)*MatchTimePerRune
	runtime.LockOSThread() // the thread's CPU clock measures this match (Encode holds it already)
	defer runtime.UnlockOSThread()
	for retry := 0; ; retry++ {
		start := threadCPU()
		if start-e.cpuStart > e.limit {
			return nil, e.timeError(r)
		}
		m, err := r.finder(retry).FindRunesMatchStartingAt(runes, at)
		if err == nil {
			return m, nil
		}
		switch {
		// regexp2's clock ticks every 100 ms, so a true timeout can come a
		// little early.
		case threadCPU()-start >= limit-limit/4:
			return nil, fmt.Errorf("pre-tokenizer pattern %s: one match used more than its limit of %v of CPU time in the %d-byte text (the pattern backtracks too much; see docs/limits.md)",
				safeio.Quote(r.pattern), limit.Round(time.Millisecond), e.inputLen)
		case retry == maxRetries:
			return nil, fmt.Errorf("pre-tokenizer pattern %s: the regexp engine failed on the %d-byte text", safeio.Quote(r.pattern), e.inputLen)
		}
	}
}

// finder is the pattern with regexp2's timeout 4^retry times matchTimeout.
func (r *regex) finder(retry int) matchFinder {
	if retry == 0 {
		return r.re
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.longer[retry-1] == nil {
		re, err := regexp2.Compile(foldCaseLiterals(r.pattern), regexp2.None)
		if err != nil {
			return r.re // compiled once already, so this does not happen
		}
		re.MatchTimeout = matchTimeout << (2 * retry)
		r.longer[retry-1] = re
	}
	return r.longer[retry-1]
}

// foldCaseLiterals rewrites case-insensitive parts ((?i) and (?i:...)) of
// a pattern so that regexp2 matches what Oniguruma matches. regexp2
// compares lower-cased runes, whereas Oniguruma uses Unicode case folding,
// under which for example 'ſ' (U+017F) matches 's', so "'ſ" matches Qwen's
// (?i:'s|...) and [a-z] matches 'ſ'. A literal whose folding orbit
// lower-casing misses becomes a class of the whole orbit; a bracket class
// gets the runes it misses added. Escapes and group syntax are copied
// unchanged; a pattern the scanner does not understand is returned as is
// (regexp2 then reports any syntax error).
func foldCaseLiterals(p string) string {
	if !strings.Contains(p, "(?") {
		return p
	}
	rs := []rune(p)
	var out strings.Builder
	ic := false
	var stack []bool
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\\':
			j := skipEscape(rs, i)
			out.WriteString(string(rs[i:j]))
			i = j - 1
		case c == '[':
			j := skipClass(rs, i)
			if j < 0 {
				return p
			}
			if ic {
				out.WriteString(foldClassText(rs[i:j]))
			} else {
				out.WriteString(string(rs[i:j]))
			}
			i = j - 1
		case c == '(':
			j, push, newIC, ok := scanGroupOpen(rs, i, ic)
			if !ok {
				return p
			}
			if push {
				stack = append(stack, ic)
			}
			ic = newIC
			out.WriteString(string(rs[i:j]))
			i = j - 1
		case c == ')':
			if n := len(stack); n > 0 {
				ic = stack[n-1]
				stack = stack[:n-1]
			}
			out.WriteRune(c)
		case ic && needsFoldClass(c):
			out.WriteString(foldClass(c))
		default:
			out.WriteRune(c)
		}
	}
	return out.String()
}

// skipEscape returns the index after the escape starting at rs[i] == '\\'.
func skipEscape(rs []rune, i int) int {
	j := i + 2
	if j > len(rs) {
		return len(rs)
	}
	closer := rune(0)
	if j < len(rs) {
		switch {
		case rs[j] == '{' && strings.ContainsRune("pPxuok", rs[i+1]):
			closer = '}'
		case rs[j] == '<' && strings.ContainsRune("kg", rs[i+1]):
			closer = '>'
		}
	}
	if closer != 0 {
		for j < len(rs) && rs[j] != closer {
			j++
		}
		if j < len(rs) {
			j++
		}
	}
	return j
}

// skipClass returns the index after the bracket class starting at rs[i],
// or -1 if it is not closed. Nested classes and escapes are allowed.
func skipClass(rs []rune, i int) int {
	depth := 0
	for j := i; j < len(rs); j++ {
		switch rs[j] {
		case '\\':
			j++
		case '[':
			depth++
			// A ']' right after '[' or '[^' is a literal.
			if j+1 < len(rs) && rs[j+1] == '^' {
				j++
			}
			if j+1 < len(rs) && rs[j+1] == ']' {
				j++
			}
		case ']':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// scanGroupOpen reads the group syntax at rs[i] == '(' and returns the
// index after it, whether it opens a scope, and the case-insensitivity
// that applies after it.
func scanGroupOpen(rs []rune, i int, ic bool) (next int, push, newIC, ok bool) {
	j := i + 1
	if j >= len(rs) || rs[j] != '?' {
		return j, true, ic, true
	}
	j++
	if j >= len(rs) {
		return 0, false, ic, false
	}
	switch rs[j] {
	case '#': // comment
		for j < len(rs) && rs[j] != ')' {
			j++
		}
		if j == len(rs) {
			return 0, false, ic, false
		}
		// The ')' is copied by the caller's next step as a plain rune; keep
		// the scope balanced by pushing here.
		return j, true, ic, true
	case '=', '!', '>':
		return j + 1, true, ic, true
	case '<':
		if j+1 < len(rs) && (rs[j+1] == '=' || rs[j+1] == '!') {
			return j + 2, true, ic, true
		}
		return skipName(rs, j+1, '>', ic)
	case '\'':
		return skipName(rs, j+1, '\'', ic)
	case 'P':
		if j+1 < len(rs) && rs[j+1] == '<' {
			return skipName(rs, j+2, '>', ic)
		}
	}
	on := true
	v := ic
	for ; j < len(rs); j++ {
		switch c := rs[j]; {
		case c == '-':
			on = false
		case c == 'i':
			v = on
		case c == ':':
			return j + 1, true, v, true
		case c == ')':
			// Inline flags: they last to the end of the enclosing group.
			return j + 1, false, v, true
		case unicode.IsLetter(c):
		default:
			return 0, false, ic, false
		}
	}
	return 0, false, ic, false
}

// skipName skips a group name up to and including closer.
func skipName(rs []rune, j int, closer rune, ic bool) (int, bool, bool, bool) {
	for j < len(rs) && rs[j] != closer {
		j++
	}
	if j == len(rs) {
		return 0, false, ic, false
	}
	return j + 1, true, ic, true
}

// foldOrbit lists r and every rune that case-folds together with it.
func foldOrbit(r rune) []rune {
	orbit := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		orbit = append(orbit, f)
	}
	return orbit
}

// needsFoldClass reports whether lower-casing misses part of r's orbit.
func needsFoldClass(r rune) bool {
	lr := unicode.ToLower(r)
	for _, m := range foldOrbit(r) {
		if unicode.ToLower(m) != lr {
			return true
		}
	}
	return false
}

// foldClass renders r's folding orbit as a bracket class. Orbit members
// are cased letters, never class syntax, so they are written as they are.
func foldClass(r rune) string {
	return "[" + string(foldOrbit(r)) + "]"
}

var (
	foldMissOnce sync.Once
	foldMiss     []rune // runes whose orbit lower-casing does not cover
)

// foldMissRunes lists every rune for which needsFoldClass holds.
func foldMissRunes() []rune {
	foldMissOnce.Do(func() {
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if unicode.SimpleFold(r) != r && needsFoldClass(r) {
				foldMiss = append(foldMiss, r)
			}
		}
	})
	return foldMiss
}

// foldClassText adds to the bracket class cls (case-insensitive) every rune
// that Oniguruma's case folding puts in it but regexp2's lower-casing
// leaves out. In a negated class the added runes are thereby excluded, as
// Oniguruma excludes them. On any doubt cls is returned unchanged.
func foldClassText(cls []rune) string {
	neg := len(cls) > 1 && cls[1] == '^'
	body := 1
	if neg {
		body = 2
	}
	if body < len(cls) && cls[body] == ']' {
		body++ // a leading ']' is a literal; insert after it
	}
	positive := string(cls)
	if neg {
		positive = "[" + string(cls[2:])
	}
	re, err := regexp2.Compile(`\A`+positive+`\z`, regexp2.IgnoreCase)
	if err != nil {
		return string(cls)
	}
	in := func(r rune) bool {
		ok, err := re.MatchString(string(r))
		return err == nil && ok
	}
	var add []rune
	for _, r := range foldMissRunes() {
		if in(r) {
			continue
		}
		for _, m := range foldOrbit(r)[1:] {
			if in(m) {
				add = append(add, r)
				break
			}
		}
	}
	if len(add) == 0 {
		return string(cls)
	}
	return string(cls[:body]) + string(add) + string(cls[body:])
}
