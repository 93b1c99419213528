package safeio

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxShown caps how much of one name from an input a message repeats.
const maxShown = 200

// Quote returns s as a Go-quoted string with every control, format (bidi)
// and invalid byte escaped, so a tensor or file name taken from an input
// cannot move the cursor, recolour or rewrite the user's terminal. A name
// longer than 200 bytes is cut, saying how long it was.
func Quote(s string) string {
	short, rest := cut(s)
	return strconv.Quote(short) + rest
}

// Clean escapes what Quote escapes but adds no quotes, for paths and other
// text a message shows bare.
func Clean(s string) string {
	if isPlain(s) {
		return s
	}
	short, rest := cut(s)
	var b strings.Builder
	for i := 0; i < len(short); {
		r, n := utf8.DecodeRuneInString(short[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, short[i])
		case r == ' ' || strconv.IsPrint(r):
			b.WriteString(short[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String() + rest
}

// isPlain reports whether s is short, valid UTF-8 with nothing to escape.
func isPlain(s string) bool {
	if len(s) > maxShown {
		return false
	}
	for _, r := range s {
		if r == utf8.RuneError || r != ' ' && !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// cut shortens s to maxShown bytes at a rune boundary.
func cut(s string) (short, rest string) {
	if len(s) <= maxShown {
		return s, ""
	}
	n := maxShown
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], fmt.Sprintf("…(%d bytes in all)", len(s))
}

// List joins problems one per "; ", showing the first max and then how
// many more there are, so a hostile input cannot produce a huge message.
func List(problems []string, max int) string {
	if len(problems) <= max {
		return strings.Join(problems, "; ")
	}
	return strings.Join(problems[:max], "; ") + fmt.Sprintf("; and %d more", len(problems)-max)
}
