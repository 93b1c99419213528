package tokenizer

import (
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
// content keeps its id and takes the later flags.
func newAddedVocab(list []addedTokenJSON, model *bpe, nz *normalizer) *addedVocab {
	av := &addedVocab{
		byContent:  map[string]int{},
		byID:       map[int]*AddedToken{},
		normalForm: map[int]string{},
		special:    map[string]bool{},
	}
	next := len(model.vocab)
	for _, j := range list {
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
			id = next
			next++
		}
		t.ID = id
		// As in HF, a stale normalized form survives a later non-normalized
		// duplicate.
		if t.Normalized && nz != nil {
			if n := nz.apply(t.Content); n != t.Content {
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
			normd = append(normd, matchPattern{p, id})
		} else {
			raw = append(raw, matchPattern{t.Content, id})
		}
	}
	av.raw = newMatcher(raw)
	av.norm = newMatcher(normd)
	return av
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

// matchPattern is a string to find and the id it stands for.
type matchPattern struct {
	text string
	id   int
}

// matcher finds non-overlapping leftmost-longest occurrences of a set of
// strings, like the Aho-Corasick automaton HF uses, with a byte trie: the
// work at each text position is bounded by the longest token, not by how
// many tokens share a first byte.
type matcher struct {
	nodes []trieNode // nodes[0] is the root
	first [256]bool  // bytes some token starts with, to skip the rest fast
	any   bool
}

// trieNode is one byte-trie state; children are sorted by byte.
type trieNode struct {
	keys []byte
	kids []int32
	id   int // token ending here, or -1
}

func (n *trieNode) child(b byte) int32 {
	lo, hi := 0, len(n.keys)
	for lo < hi { // binary search without a closure: this is the hot loop
		mid := int(uint(lo+hi) >> 1)
		if n.keys[mid] < b {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(n.keys) && n.keys[lo] == b {
		return n.kids[lo]
	}
	return -1
}

func newMatcher(ps []matchPattern) matcher {
	m := matcher{nodes: []trieNode{{id: -1}}}
	for _, p := range ps {
		cur := int32(0)
		for i := 0; i < len(p.text); i++ {
			b := p.text[i]
			nx := m.nodes[cur].child(b)
			if nx < 0 {
				nx = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{id: -1})
				n := &m.nodes[cur]
				j := sort.Search(len(n.keys), func(j int) bool { return n.keys[j] >= b })
				n.keys = append(n.keys, 0)
				n.kids = append(n.kids, 0)
				copy(n.keys[j+1:], n.keys[j:])
				copy(n.kids[j+1:], n.kids[j:])
				n.keys[j], n.kids[j] = b, nx
			}
			cur = nx
		}
		m.nodes[cur].id = p.id
		m.first[p.text[0]] = true
		m.any = true
	}
	return m
}

// next finds the leftmost-longest match at or after from.
func (m *matcher) next(s string, from int) (start, end, id int, ok bool) {
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		cur, best := int32(0), -1
		for j := i; j < len(s); j++ {
			if cur = m.nodes[cur].child(s[j]); cur < 0 {
				break
			}
			if tid := m.nodes[cur].id; tid >= 0 {
				best, id = j+1, tid
			}
		}
		if best >= 0 {
			return i, best, id, true
		}
	}
	return 0, 0, 0, false
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
