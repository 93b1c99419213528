package chat

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer splits a template as Jinja's does with the settings
// transformers uses: {{ }}, {% %} and {# #} delimiters, whitespace control
// with - and +, trim_blocks (a block tag eats the newline after it) and
// lstrip_blocks (spaces before a block tag on its line are dropped), raw
// blocks, newlines normalized to \n and one trailing newline dropped.

type tokKind uint8

const (
	tEOF tokKind = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	s    string // data, name, string value or operator
	num  value  // tInt: int64 or bigInt; tFloat: float64
	line int
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tData:
		return "template data / text"
	case tVarBegin:
		return "begin of print statement"
	case tVarEnd:
		return "end of print statement"
	case tBlockBegin:
		return "begin of statement block"
	case tBlockEnd:
		return "end of statement block"
	case tString:
		return "string"
	case tInt:
		return "integer"
	case tFloat:
		return "float"
	}
	return t.s
}

type lexer struct {
	src          string
	pos, line    int
	toks         []token
	lineStarting bool
}

// lex tokenizes a whole template.
func lex(src string) ([]token, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	lx := &lexer{src: src, line: 1, lineStarting: true}
	if err := lx.root(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) fail(format string, args ...any) error {
	return newError(lx.line, format, args...)
}

func (lx *lexer) emit(kind tokKind, s string, line int) {
	lx.toks = append(lx.toks, token{kind: kind, s: s, line: line})
}

// nextTag finds the next {{, {% or {# at or after pos.
func (lx *lexer) nextTag() int {
	for i := lx.pos; ; {
		j := strings.IndexByte(lx.src[i:], '{')
		if j < 0 || i+j+1 >= len(lx.src) {
			return -1
		}
		i += j
		switch lx.src[i+1] {
		case '{', '%', '#':
			return i
		}
		i++
	}
}

func (lx *lexer) root() error {
	for lx.pos < len(lx.src) {
		at := lx.nextTag()
		if at < 0 {
			lx.emit(tData, lx.src[lx.pos:], lx.line)
			lx.line += strings.Count(lx.src[lx.pos:], "\n")
			lx.pos = len(lx.src)
			return nil
		}
		kind := lx.src[at+1]
		open := at + 2
		sign := byte(0)
		if open < len(lx.src) && (lx.src[open] == '-' || lx.src[open] == '+') {
			sign = lx.src[open]
			open++
		}
		rawEnd, rawSign := 0, byte(0)
		if kind == '%' {
			rawEnd, rawSign = matchRawBegin(lx.src, at)
			if rawEnd > 0 {
				sign = rawSign
			}
		}
		text := lx.src[lx.pos:at]
		lineAtText := lx.line
		lx.line += strings.Count(text, "\n")
		switch {
		case sign == '-':
			text = strings.TrimRightFunc(text, pyIsSpace)
		case sign != '+' && kind != '{':
			// lstrip_blocks: drop the spaces between the line's start and the tag.
			lpos := strings.LastIndexByte(text, '\n') + 1
			if (lpos > 0 || lx.lineStarting) && lpos < len(text) && allSpace(text[lpos:]) {
				text = text[:lpos]
			}
		}
		if text != "" {
			lx.emit(tData, text, lineAtText)
		}
		lx.lineStarting = false
		switch {
		case rawEnd > 0:
			lx.line += strings.Count(lx.src[at:rawEnd], "\n")
			lx.pos = rawEnd
			lx.lineStarting = strings.HasSuffix(lx.src[at:rawEnd], "\n")
			if err := lx.raw(); err != nil {
				return err
			}
		case kind == '#':
			if err := lx.comment(open); err != nil {
				return err
			}
		case kind == '%':
			lx.emit(tBlockBegin, "", lx.line)
			lx.pos = open
			if err := lx.tag(true); err != nil {
				return err
			}
		default:
			lx.emit(tVarBegin, "", lx.line)
			lx.pos = open
			if err := lx.tag(false); err != nil {
				return err
			}
		}
	}
	return nil
}

func allSpace(s string) bool {
	for _, r := range s {
		if !pyIsSpace(r) {
			return false
		}
	}
	return true
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// matchRawBegin matches {%[-+] raw (-%}\s*|%}) at i; it returns the end of
// the match (0 if none) and the sign.
func matchRawBegin(s string, i int) (int, byte) {
	j := i + 2
	sign := byte(0)
	if j < len(s) && (s[j] == '-' || s[j] == '+') {
		sign = s[j]
		j++
	}
	j = skipSpace(s, j)
	if !strings.HasPrefix(s[j:], "raw") {
		return 0, 0
	}
	j = skipSpace(s, j+3)
	switch {
	case strings.HasPrefix(s[j:], "-%}"):
		return skipSpace(s, j+3), sign
	case strings.HasPrefix(s[j:], "%}"):
		return j + 2, sign
	}
	return 0, 0
}

// raw emits the text up to {% endraw %} as data.
func (lx *lexer) raw() error {
	for i := lx.pos; ; {
		j := strings.Index(lx.src[i:], "{%")
		if j < 0 {
			return lx.fail("Missing end of raw directive")
		}
		at := i + j
		k := at + 2
		sign := byte(0)
		if k < len(lx.src) && (lx.src[k] == '-' || lx.src[k] == '+') {
			sign = lx.src[k]
			k++
		}
		k = skipSpace(lx.src, k)
		if !strings.HasPrefix(lx.src[k:], "endraw") {
			i = at + 2
			continue
		}
		k = skipSpace(lx.src, k+6)
		end := lx.blockEnd(k)
		if end < 0 {
			i = at + 2
			continue
		}
		text := lx.src[lx.pos:at]
		line := lx.line
		switch {
		case sign == '-':
			text = strings.TrimRightFunc(text, pyIsSpace)
		case sign != '+':
			lpos := strings.LastIndexByte(text, '\n') + 1
			if (lpos > 0 || lx.lineStarting) && lpos < len(text) && allSpace(text[lpos:]) {
				text = text[:lpos]
			}
		}
		if text != "" {
			lx.emit(tData, text, line)
		}
		lx.line += strings.Count(lx.src[lx.pos:end], "\n")
		lx.lineStarting = strings.HasSuffix(lx.src[lx.pos:end], "\n")
		lx.pos = end
		return nil
	}
}

// blockEnd matches a block's end at i: +%}, -%} and the whitespace after
// it, or %} and (trim_blocks) one newline after it. It returns the end of
// the match, or -1.
func (lx *lexer) blockEnd(i int) int {
	s := lx.src
	switch {
	case strings.HasPrefix(s[i:], "+%}"):
		return i + 3
	case strings.HasPrefix(s[i:], "-%}"):
		return skipSpace(s, i+3)
	case strings.HasPrefix(s[i:], "%}"):
		if i+2 < len(s) && s[i+2] == '\n' {
			return i + 3
		}
		return i + 2
	}
	return -1
}

func (lx *lexer) comment(from int) error {
	for i := from; ; {
		j := strings.Index(lx.src[i:], "#}")
		if j < 0 {
			return lx.fail("Missing end of comment tag")
		}
		at := i + j
		var end int
		switch {
		case at > from && lx.src[at-1] == '+':
			end = at + 2
		case at > from && lx.src[at-1] == '-':
			end = skipSpace(lx.src, at+2)
		default:
			end = at + 2
			if end < len(lx.src) && lx.src[end] == '\n' {
				end++
			}
		}
		lx.line += strings.Count(lx.src[lx.pos:end], "\n")
		lx.lineStarting = strings.HasSuffix(lx.src[lx.pos:end], "\n")
		lx.pos = end
		return nil
	}
}

var operators3 = []string{"//", "**", "==", "!=", ">=", "<="}

const operators1 = "+-/*%~[](){}><=.:|,;"

// tag lexes the inside of {% %} (block) or {{ }} until its end.
func (lx *lexer) tag(block bool) error {
	var balance []byte
	s := lx.src
	for lx.pos < len(s) {
		i := lx.pos
		if len(balance) == 0 {
			end := -1
			if block {
				end = lx.blockEnd(i)
			} else if strings.HasPrefix(s[i:], "-}}") {
				end = skipSpace(s, i+3)
			} else if strings.HasPrefix(s[i:], "}}") {
				end = i + 2
			}
			if end >= 0 {
				kind := tVarEnd
				if block {
					kind = tBlockEnd
				}
				lx.emit(kind, "", lx.line)
				lx.line += strings.Count(s[i:end], "\n")
				lx.lineStarting = strings.HasSuffix(s[i:end], "\n")
				lx.pos = end
				return nil
			}
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case pyIsSpace(r):
			j := skipSpace(s, i)
			lx.line += strings.Count(s[i:j], "\n")
			lx.pos = j
			continue
		case r >= '0' && r <= '9':
			if err := lx.number(); err != nil {
				return err
			}
			continue
		case r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.Nl, r):
			j := i + n
			for j < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[j:])
				if !isIdentContinue(r2) {
					break
				}
				j += n2
			}
			lx.emit(tName, s[i:j], lx.line)
			lx.pos = j
			continue
		case r == '\'' || r == '"':
			if end := stringEnd(s, i); end > 0 {
				v, err := unescapeString(s[i+1 : end-1])
				if err != nil {
					return lx.fail("%v", err)
				}
				lx.emit(tString, v, lx.line)
				lx.line += strings.Count(s[i:end], "\n")
				lx.pos = end
				continue
			}
		}
		op := ""
		for _, o := range operators3 {
			if strings.HasPrefix(s[i:], o) {
				op = o
				break
			}
		}
		if op == "" && strings.IndexByte(operators1, s[i]) >= 0 {
			op = s[i : i+1]
		}
		if op == "" {
			return lx.fail("unexpected char %s", reprQuick(string(r)))
		}
		switch op {
		case "(", "[", "{":
			if len(balance) >= MaxParseDepth {
				return limitError(lx.line, "brackets nested deeper than %d levels", MaxParseDepth)
			}
			balance = append(balance, map[string]byte{"(": ')', "[": ']', "{": '}'}[op])
		case ")", "]", "}":
			if len(balance) == 0 {
				return lx.fail("unexpected '%s'", op)
			}
			want := balance[len(balance)-1]
			if want != op[0] {
				return lx.fail("unexpected '%s', expected '%c'", op, want)
			}
			balance = balance[:len(balance)-1]
		}
		lx.emit(tOp, op, lx.line)
		lx.pos = i + len(op)
	}
	return nil // end of template inside a tag: the parser reports it
}

func isIdentContinue(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Nd, unicode.Nl, unicode.Pc) ||
		r == 0xb7 || r == 0x387 || (r >= 0x1369 && r <= 0x1371) || r == 0x19da
}

// stringEnd returns the end of the quoted string at i, or 0 when it has no
// closing quote.
func stringEnd(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return 0
}
