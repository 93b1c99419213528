package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Batch forms of the streaming internals, for tests.

// testEncoder is an encoder with the default time limit and no tokenizer.
func testEncoder() *encoder {
	return (&Tokenizer{}).newEncoder(0)
}

// findMatches collects the spans scan gives for s.
func (r *regex) findMatches(s string) ([]span, error) {
	var out []span
	var buf []rune
	runtime.LockOSThread() // the encoder's clock is this thread's
	defer runtime.UnlockOSThread()
	err := r.scan(testEncoder(), s, &buf, func(sp span) error {
		out = append(out, sp)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// splitAll appends to dst the pieces split gives for s.
func (r *regex) splitAll(dst []string, s string, b splitBehavior, invert bool) ([]string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := r.split(testEncoder(), 0, s, b, invert, func(p string) error {
		dst = append(dst, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return dst, nil
}

// preTokenize returns the words the steps make of piece, as BPE would see
// them.
func preTokenize(steps []preStep, piece string) ([]string, error) {
	var words []string
	t := &Tokenizer{pre: steps, model: &bpe{}}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e := t.newEncoder(len(piece))
	e.sink = func(w []byte) error {
		words = append(words, string(w))
		return nil
	}
	if err := e.pretok(0, piece); err != nil {
		return nil, err
	}
	return words, nil
}

// tokenize appends the ids of word to dst.
func (b *bpe) tokenize(dst []int, word string) ([]int, error) {
	var l idList
	var sc bpeScratch
	if err := b.tokenizeWord(&l, []byte(word), &sc); err != nil {
		return dst, err
	}
	return append(dst, l.ints()...), nil
}

// newBPEFrom builds a model from a vocabulary and a list of merges.
func newBPEFrom(vocab map[string]int, merges [][2]string, m *modelJSON) (*bpe, error) {
	vocabR, dups := newIDTable(vocab)
	if len(dups) > 0 {
		return nil, fmt.Errorf("duplicate ids: %v", dups)
	}
	b := newBPE(vocab, vocabR, m)
	for i, p := range merges {
		if err := b.addMerge(i, p[0], p[1]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// repeatTo repeats unit to n bytes, rounded down to whole units.
func repeatTo(unit string, n int) string {
	return strings.Repeat(unit, n/len(unit)+1)[:n-n%len(unit)]
}

// tinyJSON loads a committed tiny tokenizer.json as a map to edit.
func tinyJSON(t testing.TB, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdataDir, "tiny", name))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

func fromMap(t testing.TB, m map[string]any) (*Tokenizer, error) {
	t.Helper()
	data, err := json.Marshal(m)
	require.NoError(t, err)
	return FromJSON(data)
}
