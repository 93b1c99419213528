package safeio

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxShown caps how much of one name from an input a message repeats.
const maxShown = 200

// Quote returns s as a Go-quoted string with every control, format (bidi)
// and invalid byte escaped, so a tensor or file name taken from an input
// cannot move the cursor, recolour or rewrite the user's terminal. A name
// longer than 200 bytes is cut, saying how long it was. Credentials are
// redacted first (see Redact).
func Quote(s string) string {
	short, rest := cut(Redact(s))
	return strconv.Quote(short) + rest
}

// Clean escapes what Quote escapes but adds no quotes, for paths, URLs and
// other outside text a message shows bare: the one way qwenref prints such
// text. Credentials are redacted first (see Redact).
func Clean(s string) string {
	s = Redact(s)
	if isPlain(s) {
		return s
	}
	short, rest := cut(s)
	var b strings.Builder
	escapeInto(&b, short, "")
	return b.String() + rest
}

// Text is Clean for a whole message of outside text (a plug-in's error,
// a note that repeats what the user typed): credentials redacted and
// controls escaped, but its line breaks and tabs kept and nothing cut.
func Text(s string) string {
	s = Redact(s)
	var b strings.Builder
	escapeInto(&b, s, "\n\t")
	return b.String()
}

// escapeInto writes s with every control, format and invalid byte escaped,
// except the characters in keep.
func escapeInto(b *strings.Builder, s, keep string) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case r == ' ' || strconv.IsPrint(r) || strings.ContainsRune(keep, r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
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

// Redact hides credentials in text about to be printed: the password of a
// URL (https://user:TOKEN@mirror, as HF_ENDPOINT may hold it) as
// url.URL.Redacted shows it, a Hugging Face token (hf_ and 30 or more
// letters and digits) and the value of an Authorization header that a
// server's error text echoes, each as hf_***.
func Redact(s string) string {
	if !strings.Contains(s, "hf_") && !strings.Contains(s, "@") && !containsFold(s, "authorization") {
		return s
	}
	s = urlPattern.ReplaceAllStringFunc(s, func(m string) string {
		u, err := url.Parse(m)
		if err != nil || u.User == nil {
			return m
		}
		if _, has := u.User.Password(); !has { // https://TOKEN@mirror: the name is the secret
			u.User = url.User("xxxxx")
			return u.String()
		}
		return u.Redacted()
	})
	s = authPattern.ReplaceAllString(s, "${1}hf_***")
	return tokenPattern.ReplaceAllString(s, "hf_***")
}

var (
	urlPattern   = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+@[^\s"'<>]*`)
	authPattern  = regexp.MustCompile(`(?i)(authorization"?\s*[:=]\s*"?(?:bearer\s+|basic\s+|token\s+)?)[^\s"',;]+`)
	tokenPattern = regexp.MustCompile(`hf_[A-Za-z0-9]{30,}`)
)

func containsFold(s, sub string) bool { return strings.Contains(strings.ToLower(s), sub) }
