package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is one entry of a tokenizer.json's added_tokens: a string that
// is cut out of the input whole, before normalization and pre-tokenization,
// and maps to a single id.
type AddedToken struct {
	// ID is the id HF assigns: the model vocabulary's id if Content is in
	// it, otherwise the next free id after the model vocabulary, in file
	// order. (The "id" field of the file is not consulted, as in HF.)
	ID int
	// Content is the token's text as written in the file.
	Content string
	// Special marks control tokens such as <|im_end|>.
	Special bool
	// Normalized tokens are matched in normalized text (against their own
	// normalized form); the others in the raw input.
	Normalized bool
	// LStrip and RStrip make the token swallow the whitespace to its left
	// or right.
	LStrip, RStrip bool
	// SingleWord tokens match only where neither neighbour is a word
	// character.
	SingleWord bool
}

// addedVocab holds the added tokens and the two matchers HF builds: one
// for non-normalized tokens over the raw text, one for normalized tokens
// over normalized text.
type addedVocab struct {
	byContent  map[string]int
	byID       map[int]*AddedToken
	normalForm map[int]string // normalized content, where it differs
	special    map[string]bool
	raw, norm  matcher
}

// newAddedVocab assigns ids and builds the matchers following HF's
// AddedVocabulary::add_tokens: empty contents are skipped; a repeated
// content keeps its id and takes the later flags. A normalized form longer
// than MaxAddedTokenBytes (NFKC can make text 11 times longer) and tries
// over MaxAddedTrieNodes are refused.
func newAddedVocab(list []addedTokenJSON, model *bpe, nz *normalizer) (*addedVocab, error) {
	av := &addedVocab{
		byContent:  map[string]int{},
		byID:       map[int]*AddedToken{},
		normalForm: map[int]string{},
		special:    map[string]bool{},
	}
	vocabSize := len(model.vocab)
	maxAdded := -1 // the highest id given to an added token so far
	for i, j := range list {
		if j.Content == "" {
			continue
		}
		t := AddedToken{
			Content: j.Content, Special: j.Special, Normalized: j.Normalized,
			LStrip: j.LStrip, RStrip: j.RStrip, SingleWord: j.SingleWord,
		}
		id, ok := av.byContent[t.Content]
		if !ok {
			id, ok = model.vocab[t.Content]
		}
		if !ok {
			// HF's rule: after the model vocabulary, or after the highest
			// added id once one lies there or beyond (an added token in a
			// sparse vocabulary can), so that no two added tokens share an id.
			id = vocabSize
			if maxAdded >= vocabSize || vocabSize == 0 {
				id = maxAdded + 1
			}
		}
		maxAdded = max(maxAdded, id)
		t.ID = id
		// As in HF, a stale normalized form survives a later non-normalized
		// duplicate.
		if t.Normalized && nz != nil {
			if n := nz.apply(t.Content); n != t.Content {
				if len(n) > MaxAddedTokenBytes {
					return nil, fmt.Errorf("added_tokens[%d].content is %d bytes once normalized, over the limit of %d (see docs/limits.md)", i, len(n), MaxAddedTokenBytes)
				}
				av.normalForm[id] = n
			}
		}
		av.byContent[t.Content] = id
		if t.Special {
			av.special[t.Content] = true
		}
		tc := t
		av.byID[id] = &tc
	}
	var raw, normd []matchPattern
	for id, t := range av.byID {
		if t.Normalized {
			p := t.Content
			if n, ok := av.normalForm[id]; ok {
				p = n
			}
			if p != "" {
				normd = append(normd, matchPattern{p, id})
			}
		} else {
			raw = append(raw, matchPattern{t.Content, id})
		}
	}
	var err error
	if av.raw, av.norm, err = buildMatchers(raw, normd); err != nil {
		return nil, err
	}
	return av, nil
}

// tokens returns the added tokens sorted by id.
func (av *addedVocab) tokens() []AddedToken {
	out := make([]AddedToken, 0, len(av.byID))
	for _, t := range av.byID {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// split walks s, calling emit for every stretch of plain text (id -1) and
// every added token found, applying single_word, lstrip and rstrip as HF's
// AddedVocabulary::find_matches does. Empty stretches are not emitted.
func (av *addedVocab) split(m *matcher, s string, emit func(text string, id int) error) error {
	if !m.any {
		if s == "" {
			return nil
		}
		return emit(s, -1)
	}
	startOffset := 0
	for from := 0; from < len(s); {
		start, stop, id, ok := m.next(s, from)
		if !ok {
			break
		}
		from = stop
		t := av.byID[id]
		if t.SingleWord {
			startSpace := start == 0 || !endsWithWordChar(s[:start])
			stopSpace := stop == len(s) || !startsWithWordChar(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.LStrip {
			start = max(start-trailingSpaceLen(s[:start]), startOffset)
		}
		if t.RStrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if startOffset < start {
			if err := emit(s[startOffset:start], -1); err != nil {
				return err
			}
		}
		if err := emit("", id); err != nil {
			return err
		}
		startOffset = stop
	}
	if startOffset < len(s) {
		return emit(s[startOffset:], -1)
	}
	return nil
}

// isWordChar is Rust regex's Unicode \w: alphabetic, marks, decimal
// digits, connector punctuation and the joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

func endsWithWordChar(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// leadingSpaceLen is the byte length of the whitespace s starts with
// (Unicode White_Space, which is what unicode.IsSpace tests).
func leadingSpaceLen(s string) int {
	return len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
}

// trailingSpaceLen is the byte length of the whitespace s ends with.
func trailingSpaceLen(s string) int {
	return len(s) - len(strings.TrimRightFunc(s, unicode.IsSpace))
}
