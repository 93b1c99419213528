package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// parseModel decodes and validates the model section and builds the BPE
// model: the vocabulary (ids checked to fit u32, like HF, and to be
// distinct) and the merges, read one at a time so that a long list is
// never held twice.
func parseModel(raw json.RawMessage) (*bpe, error) {
	var m modelJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if m.Type != nil && *m.Type != "BPE" {
		return nil, fmt.Errorf("model.type %q: only BPE models are supported", *m.Type)
	}
	if m.Vocab == nil || isNull(m.Merges) {
		return nil, fmt.Errorf("model: missing vocab or merges (only BPE models are supported)")
	}
	if m.Dropout != nil {
		if *m.Dropout < 0 || *m.Dropout > 1 || math.IsNaN(*m.Dropout) {
			return nil, fmt.Errorf("model.dropout %v: must be between 0 and 1", *m.Dropout)
		}
		if *m.Dropout != 0 {
			// Dropout makes encoding random; a reference tokenizer must not be.
			return nil, fmt.Errorf("model.dropout %v: BPE dropout is not supported", *m.Dropout)
		}
	}
	for tok, id := range m.Vocab {
		if id < 0 || int64(id) > math.MaxUint32 {
			return nil, fmt.Errorf("model.vocab[%s]: id %d is outside 0..2^32-1", safeio.Quote(tok), id)
		}
	}
	vocabR, dups := newIDTable(m.Vocab)
	if len(dups) > 0 {
		slices.Sort(dups)
		return nil, fmt.Errorf("model.vocab: %d duplicate ids: %s", len(dups), safeio.List(dups, 20))
	}
	b := newBPE(m.Vocab, vocabR, &m)
	if err := parseMerges(m.Merges, b.addMerge); err != nil {
		return nil, err
	}
	return b, nil
}

// idTable maps ids to tokens: a slice when the ids are dense (as in every
// real vocabulary), else a map.
type idTable struct {
	dense  []string
	has    []uint64 // a bit per dense entry: a token may be ""
	sparse map[int]string
}

// newIDTable inverts vocab, listing the ids given to two tokens.
func newIDTable(vocab map[string]int) (idTable, []string) {
	var t idTable
	maxID := -1
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	if maxID < 2*len(vocab)+1024 {
		t.dense = make([]string, maxID+1)
		t.has = make([]uint64, (maxID+64)/64)
	} else {
		t.sparse = make(map[int]string, len(vocab))
	}
	var dups []string
	for tok, id := range vocab {
		if other, dup := t.get(id); dup {
			a, b := min(tok, other), max(tok, other)
			dups = append(dups, fmt.Sprintf("id %d is given to both %s and %s", id, safeio.Quote(a), safeio.Quote(b)))
		}
		t.set(id, tok)
	}
	return t, dups
}

func (t *idTable) set(id int, tok string) {
	if t.sparse != nil {
		t.sparse[id] = tok
		return
	}
	t.dense[id] = tok
	t.has[id/64] |= 1 << (id % 64)
}

// get returns the token of id.
func (t *idTable) get(id int) (string, bool) {
	if t.sparse != nil {
		tok, ok := t.sparse[id]
		return tok, ok
	}
	if id < 0 || id >= len(t.dense) || t.has[id/64]&(1<<(id%64)) == 0 {
		return "", false
	}
	return t.dense[id], true
}

var errMergesShape = errors.New(`model.merges: want a list of "a b" strings or [a, b] pairs`)

// parseMerges passes each merge rule to add, in order. It accepts both
// serialisations HF writes, but not a mixture: [["a", "b"], ...] and the
// legacy ["a b", ...] (where "#version" lines are skipped and every other
// line must have exactly two space-separated parts). The rules are decoded
// one at a time.
func parseMerges(raw json.RawMessage, add func(i int, a, b string) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return errMergesShape
	}
	pairs, lines := false, false
	var pair []string
	var line string
	for i := 0; dec.More(); {
		var el json.RawMessage
		if err := dec.Decode(&el); err != nil {
			return fmt.Errorf("model.merges: %w", err)
		}
		switch {
		case len(el) > 0 && el[0] == '[' && !lines:
			pairs = true
			pair = pair[:0]
			if err := json.Unmarshal(el, &pair); err != nil {
				return errMergesShape
			}
			if len(pair) != 2 {
				return fmt.Errorf("model.merges[%d]: want a pair of tokens, got %d elements", i, len(pair))
			}
			if err := add(i, pair[0], pair[1]); err != nil {
				return err
			}
			i++
		case len(el) > 0 && el[0] == '"' && !pairs:
			lines = true
			if err := json.Unmarshal(el, &line); err != nil {
				return errMergesShape
			}
			if strings.HasPrefix(line, "#version") {
				continue
			}
			a, b, ok := splitMergeLine(line)
			if !ok {
				return fmt.Errorf("model.merges[%d]: %s is not two tokens separated by one space", i, safeio.Quote(line))
			}
			if err := add(i, a, b); err != nil {
				return err
			}
			i++
		default:
			return errMergesShape
		}
	}
	return nil
}

// splitMergeLine splits "a b" at its only space.
func splitMergeLine(l string) (string, string, bool) {
	a, b, ok := strings.Cut(l, " ")
	if !ok || strings.Contains(b, " ") {
		return "", "", false
	}
	return a, b, true
}
