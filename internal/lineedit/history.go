package lineedit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/qwenref/qwenref/internal/safeio"
	"golang.org/x/term"
)

// maxHistoryFile bounds the history file read back.
const maxHistoryFile = 16 << 20

// HistoryPath is where a program's history is kept: under
// $XDG_STATE_HOME, else ~/.local/state, in a folder named for the program.
func HistoryPath(program, name string) (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, program, name), nil
}

// LoadHistory reads a history file: one JSON string a line, so an entry
// keeps its newlines. A missing file is an empty history; lines that do not
// read are skipped.
func LoadHistory(path string, limit int) ([]string, error) {
	data, err := safeio.ReadCapped(path, maxHistoryFile, "the chat history")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxHistoryFile)
	for sc.Scan() {
		var s string
		if json.Unmarshal(sc.Bytes(), &s) == nil && s != "" {
			out = append(out, s)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// SaveHistory writes the history (its folder made private if new).
func SaveHistory(path string, history []string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return safeio.WriteFile(path, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		for _, s := range history {
			b, _ := json.Marshal(s)
			bw.Write(append(b, '\n'))
		}
		return bw.Flush()
	}, safeio.WriteOptions{Mode: 0o600})
}

// Raw puts the terminal fd in raw mode and returns the function that
// restores it.
func Raw(fd int) (restore func(), err error) {
	st, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	return func() { _ = term.Restore(fd, st) }, nil
}

// Width returns fd's columns (0 when it is no terminal).
func Width(fd int) int {
	w, _, err := term.GetSize(fd)
	if err != nil {
		return 0
	}
	return w
}
