package lineedit

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func editor(keys string, history ...string) (*Editor, *bytes.Buffer) {
	var out bytes.Buffer
	return &Editor{In: strings.NewReader(keys), Out: &out, Prompt: "> ", More: "… ", History: history}, &out
}

// The keys a user types come back as the entry they edit.
func TestReadLineEdits(t *testing.T) {
	long := strings.Repeat("x", 10000)
	for _, c := range []struct{ name, keys, want string }{
		{"plain", "hello\r", "hello"},
		{"left and insert", "ab\x1b[DX\r", "aXb"},
		{"home, end, delete", "abc\x1b[H\x1b[3~\x1b[Fd\r", "bcd"},
		{"backspace", "abc\x7f\x7fz\r", "az"},
		{"ctrl-w and ctrl-u", "one two\x17three\r", "one three"},
		{"kill to end", "abcdef\x01\x06\x06\x0b\r", "ab"},
		{"backslash continues", "line one\\\rline two\r", "line one\nline two"},
		{"alt-enter", "a\x1b\rb\r", "a\nb"},
		{"paste keeps newlines and length", "say: \x1b[200~" + long + "\r\nsecond\x1b[201~!\r", "say: " + long + "\nsecond!"},
		{"ctrl-c drops a typed entry", "junk\x03kept\r", "kept"},
		{"the up arrow is history, not text", "\x1b[A\x1b[A\r", "first"},
		{"down returns to the draft", "dr\x1b[A\x1b[B\r", "dr"},
	} {
		e, _ := editor(c.keys, "first", "second")
		got, err := e.ReadLine()
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
		assert.NotContains(t, got, "\x1b", c.name)
	}
}

func TestReadLineEnds(t *testing.T) {
	e, _ := editor("\x03")
	_, err := e.ReadLine()
	assert.ErrorIs(t, err, ErrInterrupted, "Ctrl-C on an empty entry")
	e, out := editor("\x04")
	_, err = e.ReadLine()
	assert.ErrorIs(t, err, io.EOF, "Ctrl-D on an empty entry")
	assert.True(t, strings.HasSuffix(out.String(), "\r\n\x1b[?2004l"), "the shell's prompt starts on a new line: %q", out.String())
	e, _ = editor("ab")
	_, err = e.ReadLine()
	assert.ErrorIs(t, err, io.EOF, "end of input")
	e, _ = editor("ab\x01\x04\r")
	got, err := e.ReadLine()
	require.NoError(t, err)
	assert.Equal(t, "b", got, "Ctrl-D on a non-empty entry deletes")
}

// Entries join the history (no repeats, no blanks, at most MaxHistory),
// and the file keeps multi-line entries whole.
func TestHistory(t *testing.T) {
	e, _ := editor("a\r\r  \ra\rb\rc\r")
	e.MaxHistory = 2
	for range 6 {
		_, err := e.ReadLine()
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"b", "c"}, e.History)

	path := filepath.Join(t.TempDir(), "state", "qwenref", "chat_history")
	got, err := LoadHistory(path, 0)
	require.NoError(t, err)
	assert.Empty(t, got, "no file yet")
	want := []string{"one", "two\nlines", `"quoted" \ back`}
	require.NoError(t, SaveHistory(path, want))
	got, err = LoadHistory(path, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = LoadHistory(path, 1)
	require.NoError(t, err)
	assert.Equal(t, want[2:], got)
}

// The redraw puts the cursor where the entry's next character goes, also
// past a wrap: after "> " and 8 characters on a 10-column terminal, the
// cursor is at the start of the second row.
func TestPlaceWraps(t *testing.T) {
	e := &Editor{Prompt: "> ", More: ". ", Width: func() int { return 10 }, buf: []rune("abcdefgh\nxy")}
	r, c := e.place(8)
	assert.Equal(t, [2]int{1, 0}, [2]int{r, c})
	r, c = e.place(11)
	assert.Equal(t, [2]int{2, 4}, [2]int{r, c})
}
