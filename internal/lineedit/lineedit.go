// Package lineedit reads lines from a terminal in raw mode: editing keys,
// a history, multi-line input (a line ending in a backslash, or
// Alt-Enter) and bracketed paste, so a paste keeps its newlines and is not
// cut at the terminal's line limit. It is the chat's input, written small:
// one buffer redrawn whole on each change.
package lineedit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInterrupted is ReadLine's answer to Ctrl-C on an empty line.
var ErrInterrupted = errors.New("interrupted")

// MaxRunes bounds one entry (a paste included): past it, input is dropped
// with a bell, so a runaway paste cannot grow the buffer without end.
const MaxRunes = 1 << 24

// Editor reads entries from a terminal already in raw mode (see Raw).
type Editor struct {
	In  io.Reader // the terminal's bytes
	Out io.Writer // the terminal
	// Prompt starts an entry and More each further line of it.
	Prompt, More string
	// Width, if set, is the terminal's columns (≤ 0: 80).
	Width func() int
	// History holds earlier entries, oldest first; ReadLine appends each
	// entry it returns, keeping at most MaxHistory (0: 1000).
	History    []string
	MaxHistory int

	r       *bufio.Reader
	buf     []rune
	pos     int // cursor, an index into buf
	row     int // the screen row of the cursor, counted from the prompt's
	hist    int // the entry shown: len(History) is the draft
	draft   []rune
	failure error
}

// ReadLine reads one entry. Ctrl-D on an empty entry returns io.EOF and
// Ctrl-C on an empty entry ErrInterrupted; Ctrl-C on a non-empty one drops
// it and starts again. A multi-line entry comes back with "\n" between its
// lines.
func (e *Editor) ReadLine() (string, error) {
	if e.r == nil {
		e.r = bufio.NewReader(e.In)
	}
	e.buf, e.pos, e.row, e.hist, e.draft = nil, 0, 0, len(e.History), nil
	e.write("\x1b[?2004h") // bracketed paste on
	defer e.write("\x1b[?2004l")
	e.refresh()
	for {
		r, _, err := e.r.ReadRune()
		if err != nil {
			e.end("\r\n")
			return "", err
		}
		switch r {
		case '\r', '\n':
			if e.pos == len(e.buf) && e.pos > 0 && e.buf[e.pos-1] == '\\' {
				e.buf[e.pos-1] = '\n'
				break
			}
			e.end("\r\n")
			line := string(e.buf)
			e.remember(line)
			return line, e.failure
		case 3: // Ctrl-C
			if len(e.buf) == 0 {
				e.end("\r\n")
				return "", ErrInterrupted
			}
			e.end("^C\r\n")
			e.buf, e.pos, e.hist = nil, 0, len(e.History)
		case 4: // Ctrl-D
			if len(e.buf) == 0 {
				e.end("\r\n")
				return "", io.EOF
			}
			e.delete(e.pos, e.pos+1)
		case 1: // Ctrl-A
			e.pos = e.lineStart()
		case 5: // Ctrl-E
			e.pos = e.lineEnd()
		case 2: // Ctrl-B
			e.pos = max(e.pos-1, 0)
		case 6: // Ctrl-F
			e.pos = min(e.pos+1, len(e.buf))
		case 8, 127: // backspace
			e.delete(e.pos-1, e.pos)
		case 11: // Ctrl-K
			e.delete(e.pos, e.lineEnd())
		case 21: // Ctrl-U
			e.delete(e.lineStart(), e.pos)
		case 23: // Ctrl-W
			i := e.pos
			for i > 0 && unicode.IsSpace(e.buf[i-1]) {
				i--
			}
			for i > 0 && !unicode.IsSpace(e.buf[i-1]) {
				i--
			}
			e.delete(i, e.pos)
		case 12: // Ctrl-L
			e.write("\x1b[H\x1b[2J")
			e.row = 0
		case 16: // Ctrl-P
			e.recall(-1)
		case 14: // Ctrl-N
			e.recall(+1)
		case 27:
			if e.escape() {
				continue // a paste: already drawn
			}
		default:
			if r == '\t' || !unicode.IsControl(r) {
				e.insert([]rune{r})
			}
		}
		e.refresh()
	}
}

// escape handles what follows ESC; it reports a paste, which is drawn.
func (e *Editor) escape() bool {
	b, err := e.r.ReadByte()
	if err != nil {
		return false
	}
	switch b {
	case '\r', '\n': // Alt-Enter
		e.insert([]rune{'\n'})
		return false
	case '[', 'O':
	default:
		return false
	}
	var seq []byte
	for len(seq) < 16 {
		c, err := e.r.ReadByte()
		if err != nil {
			return false
		}
		seq = append(seq, c)
		if c >= 0x40 && c <= 0x7e {
			break
		}
	}
	switch string(seq) {
	case "A":
		e.recall(-1)
	case "B":
		e.recall(+1)
	case "C":
		e.pos = min(e.pos+1, len(e.buf))
	case "D":
		e.pos = max(e.pos-1, 0)
	case "H", "1~", "7~":
		e.pos = e.lineStart()
	case "F", "4~", "8~":
		e.pos = e.lineEnd()
	case "3~":
		e.delete(e.pos, e.pos+1)
	case "200~":
		e.paste()
		e.refresh()
		return true
	}
	return false
}

// paste inserts everything up to the end-of-paste mark as typed text: its
// newlines (a terminal sends them as CR) stay in the entry.
func (e *Editor) paste() {
	const end = "\x1b[201~"
	var text []rune
	for {
		r, _, err := e.r.ReadRune()
		if err != nil {
			break
		}
		text = append(text, r)
		if n := len(text); n >= len(end) && string(text[n-len(end):]) == end {
			text = text[:n-len(end)]
			break
		}
		if len(text) > MaxRunes+len(end) {
			text = append(text[:MaxRunes], text[len(text)-len(end):]...) // insert rings the bell
		}
	}
	s := strings.ReplaceAll(strings.ReplaceAll(string(text), "\r\n", "\n"), "\r", "\n")
	e.insert([]rune(s))
}

func (e *Editor) insert(rs []rune) {
	if len(e.buf)+len(rs) > MaxRunes {
		e.write("\a")
		rs = rs[:max(MaxRunes-len(e.buf), 0)]
	}
	e.buf = append(e.buf[:e.pos], append(rs, e.buf[e.pos:]...)...)
	e.pos += len(rs)
}

func (e *Editor) delete(from, to int) {
	from, to = max(from, 0), min(to, len(e.buf))
	if from >= to {
		return
	}
	e.buf = append(e.buf[:from], e.buf[to:]...)
	e.pos = from
}

func (e *Editor) lineStart() int {
	i := e.pos
	for i > 0 && e.buf[i-1] != '\n' {
		i--
	}
	return i
}

func (e *Editor) lineEnd() int {
	i := e.pos
	for i < len(e.buf) && e.buf[i] != '\n' {
		i++
	}
	return i
}

// recall shows the entry d steps back (−1) or forward (+1) in the history.
func (e *Editor) recall(d int) {
	i := e.hist + d
	if i < 0 || i > len(e.History) {
		return
	}
	if e.hist == len(e.History) {
		e.draft = append([]rune(nil), e.buf...)
	}
	e.hist = i
	if i == len(e.History) {
		e.buf = append([]rune(nil), e.draft...)
	} else {
		e.buf = []rune(e.History[i])
	}
	e.pos = len(e.buf)
}

func (e *Editor) remember(line string) {
	if strings.TrimSpace(line) == "" || (len(e.History) > 0 && e.History[len(e.History)-1] == line) {
		return
	}
	e.History = append(e.History, line)
	if n := e.maxHistory(); len(e.History) > n {
		e.History = append([]string(nil), e.History[len(e.History)-n:]...)
	}
}

func (e *Editor) maxHistory() int {
	if e.MaxHistory > 0 {
		return e.MaxHistory
	}
	return 1000
}

func (e *Editor) width() int {
	if e.Width != nil {
		if w := e.Width(); w > 0 {
			return w
		}
	}
	return 80
}

// place is where the cursor stands after the prompt and buf[:n].
func (e *Editor) place(n int) (row, col int) {
	w := e.width()
	col = utf8.RuneCountInString(e.Prompt) % w
	for _, r := range e.buf[:n] {
		if r == '\n' {
			row, col = row+1, utf8.RuneCountInString(e.More)%w
			continue
		}
		if col++; col == w {
			row, col = row+1, 0
		}
	}
	return row, col
}

// refresh redraws the entry from its first row and puts the cursor back.
func (e *Editor) refresh() {
	var b strings.Builder
	if e.row > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", e.row)
	}
	b.WriteString("\r\x1b[J" + e.Prompt)
	for _, r := range e.buf {
		switch {
		case r == '\n':
			b.WriteString("\r\n" + e.More)
		case unicode.IsControl(r):
			b.WriteByte(' ') // a tab or a pasted control shows as one column
		default:
			b.WriteRune(r)
		}
	}
	endRow, endCol := e.place(len(e.buf))
	if endCol == 0 && endRow > 0 {
		b.WriteString("\r\n") // out of the terminal's pending wrap
	}
	row, col := e.place(e.pos)
	if up := endRow - row; up > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", up)
	}
	b.WriteByte('\r')
	if col > 0 {
		fmt.Fprintf(&b, "\x1b[%dC", col)
	}
	e.row = row
	e.write(b.String())
}

// end moves past the entry and writes s there.
func (e *Editor) end(s string) {
	e.pos = len(e.buf)
	e.refresh()
	e.write(s)
	e.row = 0
}

func (e *Editor) write(s string) {
	if _, err := io.WriteString(e.Out, s); err != nil && e.failure == nil {
		e.failure = err
	}
}
