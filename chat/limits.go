package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on templates and on one Render. A chat template is a program that
// comes with a checkpoint, so parsing and rendering are bounded in depth,
// work, time and memory; a template or conversation that passes a limit is
// refused with an error that wraps ErrLimit. Real templates stay far below
// every one of these: the Qwen3.5 template is 7 KB, nests 7 levels and takes
// a few thousand steps per turn.
const (
	// MaxTemplateBytes caps a template's source.
	MaxTemplateBytes = 1 << 20
	// MaxParseDepth caps nesting in a template: blocks inside blocks,
	// parentheses, brackets, and the links of operator and filter chains.
	MaxParseDepth = 200
	// MaxInputBytes caps a conversation: messages, tools and Vars, as JSON.
	MaxInputBytes = 16 << 20
	// MaxCallDepth caps nested macro calls (and recursive loops).
	MaxCallDepth = 100
	// MaxValueDepth caps the nesting of lists and dicts a template builds.
	MaxValueDepth = 200
	// MaxSteps caps the work of one Render: one step per expression and
	// statement evaluated, per loop iteration, per item a filter visits, and
	// per 64 bytes a string operation reads or writes.
	MaxSteps = 20_000_000
	// MaxOutputBytes caps the rendered text, and any one string a template
	// builds (a macro's output, a repeated or joined string, tojson's text).
	MaxOutputBytes = 16 << 20
	// MaxAllocBytes caps the memory one Render allocates in total for the
	// strings, lists and dicts it builds, freed or not.
	MaxAllocBytes = 256 << 20
	// MaxRange is the most items range() may produce, as in Jinja's sandbox.
	MaxRange = 100_000
	// DefaultTimeout is how long Render may run when Template.Timeout is 0.
	DefaultTimeout = 10 * time.Second
	// maxErrorChars caps the message of an error, so that no error echoes a
	// whole template or conversation.
	maxErrorChars = 240
)

// ErrLimit is wrapped by every error that refuses a template or a
// conversation for passing one of the limits above.
var ErrLimit = errors.New("chat template limit")

// Error is an error in a template: a syntax error found by Parse, or a
// failure while rendering, such as the template's own raise_exception. Its
// text is one line: origin, line and message.
type Error struct {
	// Origin names the template (a file, usually).
	Origin string
	// Line is the template line (1-based) where the error arose; 0 when it
	// has none.
	Line int
	// Msg is the message, on one line and at most a few hundred characters.
	Msg string
	// Raised is true when the template itself raised the error
	// (raise_exception); Msg is then the template's message.
	Raised bool
	limit  bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Origin)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Raised {
		b.WriteString(": the template raised an error: ")
	} else {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is reports whether target is ErrLimit and this error is a limit's.
func (e *Error) Is(target error) bool { return e.limit && target == ErrLimit }

// newError builds an Error with its message made one line.
func newError(line int, format string, args ...any) *Error {
	return &Error{Line: line, Msg: oneLine(fmt.Sprintf(format, args...))}
}

// limitError builds an Error for a limit that was passed.
func limitError(line int, format string, args ...any) *Error {
	e := newError(line, format, args...)
	e.limit = true
	return e
}

// oneLine makes s safe to show in a one-line error: control characters
// escaped, invalid UTF-8 replaced, and cut to maxErrorChars characters.
func oneLine(s string) string {
	var b strings.Builder
	n := 0
	for i, r := range s {
		if n == maxErrorChars {
			fmt.Fprintf(&b, "… (%d more bytes)", len(s)-i)
			break
		}
		n++
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteRune(utf8.RuneError)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// excerpt quotes at most a few dozen characters of s for an error message.
func excerpt(s string) string {
	const n = 40
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i] + "…"
}
