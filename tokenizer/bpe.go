package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// Cache limits mirror HF's BPE cache: words of 256 bytes or more are never
// cached, and the cache stops growing at 10,000 entries.
const (
	cacheMaxKeyLen  = 256
	cacheMaxEntries = 10000
)

// mergeKey packs a pair of token ids (each below 2^32).
func mergeKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// mergeInfo is a merge rule's rank (its index in the merges list; lower wins)
// and the id of the token it produces.
type mergeInfo struct {
	rank  uint32
	newID uint32
}

// bpe is the byte-pair-encoding model of a tokenizer.json.
type bpe struct {
	vocab        map[string]int
	vocabR       map[int]string
	merges       map[uint64]mergeInfo
	unkToken     string // "" when the model has none
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	mu    sync.RWMutex
	cache map[string][]int
}

// newBPE builds the model and its merge table. Like HF, every merge must
// name two vocabulary tokens whose concatenation (the second one without
// the continuing-subword prefix) is itself in the vocabulary. When a pair
// appears twice, the later rank wins, as in HF's map.
func newBPE(vocab map[string]int, merges [][2]string, m *modelJSON) (*bpe, error) {
	b := &bpe{
		vocab:        vocab,
		vocabR:       make(map[int]string, len(vocab)),
		merges:       make(map[uint64]mergeInfo, len(merges)),
		fuseUnk:      m.FuseUnk != nil && *m.FuseUnk,
		byteFallback: m.ByteFallback != nil && *m.ByteFallback,
		ignoreMerges: m.IgnoreMerges != nil && *m.IgnoreMerges,
		cache:        make(map[string][]int),
	}
	if m.UnkToken != nil {
		b.unkToken = *m.UnkToken
	}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	for tok, id := range vocab {
		b.vocabR[id] = tok
	}
	for i, pair := range merges {
		x, y := pair[0], pair[1]
		xid, ok := vocab[x]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: token %q is not in the vocabulary", i, x)
		}
		yid, ok := vocab[y]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: token %q is not in the vocabulary", i, y)
		}
		if len(y) < len(b.prefix) {
			return nil, fmt.Errorf("model.merges[%d]: token %q is shorter than continuing_subword_prefix %q", i, y, b.prefix)
		}
		merged := x + y[len(b.prefix):]
		nid, ok := vocab[merged]
		if !ok {
			return nil, fmt.Errorf("model.merges[%d]: merged token %q is not in the vocabulary", i, merged)
		}
		b.merges[mergeKey(xid, yid)] = mergeInfo{rank: uint32(i), newID: uint32(nid)}
	}
	return b, nil
}

// tokenize appends the ids of word to dst. It is safe for concurrent use.
func (b *bpe) tokenize(dst []int, word string) ([]int, error) {
	if word == "" {
		return dst, nil
	}
	if b.ignoreMerges {
		if id, ok := b.vocab[word]; ok {
			return append(dst, id), nil
		}
	}
	b.mu.RLock()
	ids, hit := b.cache[word]
	b.mu.RUnlock()
	if hit {
		return append(dst, ids...), nil
	}
	ids, err := b.mergeWord(word)
	if err != nil {
		return dst, err
	}
	if len(word) < cacheMaxKeyLen {
		b.mu.Lock()
		if len(b.cache) < cacheMaxEntries {
			b.cache[word] = ids
		}
		b.mu.Unlock()
	}
	return append(dst, ids...), nil
}

// symbol is one piece of a word during merging, in a linked list over the
// initial characters; merged-away symbols keep size 0.
type symbol struct {
	id         int
	prev, next int
	size       int
}

// mergeWord splits word into characters (with prefix/suffix, unknown and
// byte-fallback handling as in HF) and applies merges by rank.
func (b *bpe) mergeWord(word string) ([]int, error) {
	syms := make([]symbol, 0, len(word))
	add := func(id, size int) {
		n := len(syms)
		if n > 0 {
			syms[n-1].next = n
		}
		syms = append(syms, symbol{id: id, prev: n - 1, next: -1, size: size})
	}
	unkID, unkSize, haveUnk := 0, 0, false
	for i := 0; i < len(word); {
		_, w := utf8.DecodeRuneInString(word[i:])
		s := word[i : i+w]
		if i > 0 && b.prefix != "" {
			s = b.prefix + s
		}
		if i+w == len(word) && b.suffix != "" {
			s += b.suffix
		}
		i += w
		if id, ok := b.vocab[s]; ok {
			if haveUnk {
				add(unkID, unkSize)
				haveUnk = false
			}
			add(id, w)
			continue
		}
		if b.byteFallback && b.addByteFallback(s, add) {
			continue
		}
		if b.unkToken == "" {
			continue // dropped, as HF does without an unknown token
		}
		id, ok := b.vocab[b.unkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocabulary", b.unkToken)
		}
		switch {
		case haveUnk && b.fuseUnk:
			unkSize += w
		case haveUnk:
			add(unkID, unkSize)
			unkID, unkSize = id, w
		default:
			unkID, unkSize, haveUnk = id, w, true
		}
	}
	if haveUnk {
		add(unkID, unkSize)
	}
	b.mergeAll(syms)
	out := make([]int, 0, len(syms))
	for _, s := range syms {
		if s.size != 0 {
			out = append(out, s.id)
		}
	}
	return out, nil
}

// addByteFallback adds <0xXX> tokens for every byte of s (prefix and suffix
// included, as HF does) if all of them are in the vocabulary.
func (b *bpe) addByteFallback(s string, add func(id, size int)) bool {
	ids := make([]int, len(s))
	for k := 0; k < len(s); k++ {
		id, ok := b.vocab[fmt.Sprintf("<0x%02X>", s[k])]
		if !ok {
			return false
		}
		ids[k] = id
	}
	for _, id := range ids {
		add(id, 1)
	}
	return true
}

// pendingMerge is a candidate merge of the symbol at pos with its successor.
type pendingMerge struct {
	pos   int
	rank  uint32
	newID uint32
}

func (m pendingMerge) less(o pendingMerge) bool {
	if m.rank != o.rank {
		return m.rank < o.rank
	}
	return m.pos < o.pos
}

// mergeHeap is a binary min-heap by (rank, pos).
type mergeHeap []pendingMerge

func (h *mergeHeap) push(m pendingMerge) {
	*h = append(*h, m)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() pendingMerge {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].less(s[m]) {
			m = l
		}
		if r < len(s) && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// mergeAll repeatedly applies the lowest-ranked merge (leftmost on ties).
// Like HF, a queued merge is still applied after its neighbourhood changed
// if the current pair maps to the same new token; this matters only for
// vocabularies where two merge rules produce one token.
func (b *bpe) mergeAll(syms []symbol) {
	if len(syms) < 2 {
		return
	}
	h := make(mergeHeap, 0, len(syms))
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[mergeKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(pendingMerge{pos: i, rank: m.rank, newID: m.newID})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.size == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		m, ok := b.merges[mergeKey(cur.id, right.id)]
		if !ok || m.newID != top.newID {
			continue
		}
		cur.id = int(top.newID)
		cur.size += right.size
		cur.next = right.next
		syms[nextPos].size = 0
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if m, ok := b.merges[mergeKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(pendingMerge{pos: cur.prev, rank: m.rank, newID: m.newID})
			}
		}
		if cur.next >= 0 {
			if m, ok := b.merges[mergeKey(cur.id, syms[cur.next].id)]; ok {
				h.push(pendingMerge{pos: top.pos, rank: m.rank, newID: m.newID})
			}
		}
	}
}

// resetCache empties the word cache (for benchmarks).
func (b *bpe) resetCache() {
	b.mu.Lock()
	b.cache = make(map[string][]int)
	b.mu.Unlock()
}
