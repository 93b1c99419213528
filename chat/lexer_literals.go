package chat

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// Number and string literals, read as Jinja (and Python) read them.

// number lexes an integer or float literal as Jinja does: digits with
// single underscores between them, 0b/0o/0x prefixes, and floats with a
// fraction or an exponent.
func (lx *lexer) number() error {
	s, i := lx.src, lx.pos
	digits := func(j int, ok func(byte) bool) int {
		if j >= len(s) || !ok(s[j]) {
			return -1
		}
		for j < len(s) && ok(s[j]) {
			j++
			if j+1 < len(s) && s[j] == '_' && ok(s[j+1]) {
				j++
			}
		}
		return j
	}
	isDec := func(c byte) bool { return c >= '0' && c <= '9' }
	// A float: (?<!\.) digits ( (.digits)? e[+-]?digits | .digits ).
	if i == 0 || s[i-1] != '.' {
		j := digits(i, isDec)
		end := -1
		k := j
		if k < len(s) && s[k] == '.' {
			if f := digits(k+1, isDec); f > 0 {
				k, end = f, f
			}
		}
		if k < len(s) && (s[k] == 'e' || s[k] == 'E') {
			e := k + 1
			if e < len(s) && (s[e] == '+' || s[e] == '-') {
				e++
			}
			if d := digits(e, isDec); d > 0 {
				end = d
			}
		}
		if end > 0 {
			f, err := strconv.ParseFloat(strings.ReplaceAll(s[i:end], "_", ""), 64)
			if err != nil && f == 0 {
				return lx.fail("invalid float literal %s", s[i:end])
			}
			lx.toks = append(lx.toks, token{kind: tFloat, s: s[i:end], num: f, line: lx.line})
			lx.pos = end
			return nil
		}
	}
	end, base := -1, 10
	if s[i] == '0' && i+1 < len(s) {
		var ok func(byte) bool
		switch s[i+1] {
		case 'b', 'B':
			base, ok = 2, func(c byte) bool { return c == '0' || c == '1' }
		case 'o', 'O':
			base, ok = 8, func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x', 'X':
			base, ok = 16, func(c byte) bool {
				return isDec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
			}
		}
		if ok != nil {
			j := i + 2
			if j < len(s) && s[j] == '_' {
				j++
			}
			end = digits(j, ok)
			if end < 0 {
				base = 10
			}
		}
	}
	start := i
	if base != 10 {
		start = i + 2
	} else if s[i] == '0' {
		end = digits(i, func(c byte) bool { return c == '0' })
	} else {
		end = digits(i, isDec)
	}
	text := strings.ReplaceAll(s[start:end], "_", "")
	var num value
	if n, err := strconv.ParseInt(text, base, 64); err == nil {
		num = n
	} else {
		b, _ := new(big.Int).SetString(text, base)
		num = bigInt(b.String())
	}
	lx.toks = append(lx.toks, token{kind: tInt, s: s[i:end], num: num, line: lx.line})
	lx.pos = end
	return nil
}

// unescapeString decodes a string literal as Jinja does (Python's
// unicode-escape codec after backslash-replacing non-ASCII characters).
func unescapeString(body string) (string, error) {
	if !strings.Contains(body, `\`) {
		return body, nil
	}
	// Step 1: characters beyond ASCII become \x, \u or \U escapes, so that a
	// backslash before one escapes the escape's backslash, as in Python.
	var pre strings.Builder
	for _, r := range body {
		switch {
		case r < 0x80:
			pre.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&pre, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&pre, `\u%04x`, r)
		default:
			fmt.Fprintf(&pre, `\U%08x`, r)
		}
	}
	s := pre.String()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("\\ at end of string")
		}
		i++
		switch c = s[i]; c {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(c)
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			n, j := 0, i
			for ; j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7'; j++ {
				n = n*8 + int(s[j]-'0')
			}
			b.WriteRune(rune(n))
			i = j - 1
		case 'x', 'u', 'U':
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+width > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", c)
			}
			hex := s[i+1 : i+1+width]
			n, err := strconv.ParseUint(hex, 16, 32)
			if err != nil || strings.ContainsAny(hex, "+-_") {
				return "", fmt.Errorf("truncated \\%c escape", c)
			}
			switch {
			case n > unicode.MaxRune:
				return "", fmt.Errorf("illegal Unicode character \\%c%s", c, hex)
			case n >= 0xd800 && n < 0xe000:
				return "", fmt.Errorf("a lone surrogate \\%c%s (not valid in UTF-8)", c, hex)
			}
			b.WriteRune(rune(n))
			i += width
		case 'N':
			return "", fmt.Errorf(`\N{…} escapes are not supported`)
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
