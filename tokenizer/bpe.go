package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
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
	vocabR       idTable
	merges       map[uint64]mergeInfo
	unkToken     string // "" when the model has none
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	fallbackIDs [256]int // the id of "<0xXX>" for each byte, or -1

	mu    sync.RWMutex
	cache map[string][]uint32
}

// newBPE builds the model around a checked vocabulary and its inverse;
// addMerge then adds the merge rules in order.
func newBPE(vocab map[string]int, vocabR idTable, m *modelJSON) *bpe {
	b := &bpe{
		vocab:        vocab,
		vocabR:       vocabR,
		merges:       make(map[uint64]mergeInfo),
		fuseUnk:      m.FuseUnk != nil && *m.FuseUnk,
		byteFallback: m.ByteFallback != nil && *m.ByteFallback,
		ignoreMerges: m.IgnoreMerges != nil && *m.IgnoreMerges,
		cache:        make(map[string][]uint32),
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
	for c := range b.fallbackIDs {
		id, ok := vocab[fmt.Sprintf("<0x%02X>", c)]
		if !ok {
			id = -1
		}
		b.fallbackIDs[c] = id
	}
	return b
}

// addMerge adds merge rule i, x+y. Like HF, it must name two vocabulary
// tokens whose concatenation (the second one without the
// continuing-subword prefix) is itself in the vocabulary. When a pair
// appears twice, the later rank wins, as in HF's map.
func (b *bpe) addMerge(i int, x, y string) error {
	xid, ok := b.vocab[x]
	if !ok {
		return fmt.Errorf("model.merges[%d]: token %s is not in the vocabulary", i, safeio.Quote(x))
	}
	yid, ok := b.vocab[y]
	if !ok {
		return fmt.Errorf("model.merges[%d]: token %s is not in the vocabulary", i, safeio.Quote(y))
	}
	if len(y) < len(b.prefix) {
		return fmt.Errorf("model.merges[%d]: token %s is shorter than continuing_subword_prefix %s", i, safeio.Quote(y), safeio.Quote(b.prefix))
	}
	merged := x + y[len(b.prefix):]
	nid, ok := b.vocab[merged]
	if !ok {
		return fmt.Errorf("model.merges[%d]: merged token %s is not in the vocabulary", i, safeio.Quote(merged))
	}
	b.merges[mergeKey(xid, yid)] = mergeInfo{rank: uint32(i), newID: uint32(nid)}
	return nil
}

// bpeScratch is the working memory of one Encode call, reused from word
// to word: a word of n characters needs 24n bytes here, whatever its size.
type bpeScratch struct {
	syms []symbol
	heap mergeHeap
}

// tokenizeWord adds the ids of word to dst. word is only read during the
// call. It is safe for concurrent use (with separate scratch).
func (b *bpe) tokenizeWord(dst *idList, word []byte, sc *bpeScratch) error {
	if len(word) == 0 {
		return nil
	}
	if b.ignoreMerges {
		if id, ok := b.vocab[string(word)]; ok {
			dst.add(id)
			return nil
		}
	}
	cacheable := len(word) < cacheMaxKeyLen
	if cacheable {
		b.mu.RLock()
		ids, hit := b.cache[string(word)]
		b.mu.RUnlock()
		if hit {
			dst.addAll(ids)
			return nil
		}
	}
	syms, err := b.mergeWord(word, sc)
	if err != nil {
		return err
	}
	var ids []uint32
	if cacheable {
		ids = make([]uint32, 0, len(syms))
	}
	for _, s := range syms {
		if s.prev != merged {
			dst.add(int(s.id))
			if cacheable {
				ids = append(ids, s.id)
			}
		}
	}
	if cacheable {
		b.mu.Lock()
		if len(b.cache) < cacheMaxEntries {
			b.cache[string(word)] = ids
		}
		b.mu.Unlock()
	}
	return nil
}

// symbol is one piece of a word during merging, in a linked list over the
// initial characters; merged-away symbols have prev == merged.
type symbol struct {
	id         uint32
	prev, next int32
}

// merged marks a symbol that was merged into its left neighbour.
const merged = -2

// mergeWord splits word into characters (with prefix/suffix, unknown and
// byte-fallback handling as in HF) and applies merges by rank. The symbols
// it returns live in sc.
func (b *bpe) mergeWord(word []byte, sc *bpeScratch) ([]symbol, error) {
	syms := sc.syms[:0]
	if n := utf8.RuneCount(word); cap(syms) < n {
		syms = make([]symbol, 0, n)
	}
	add := func(id int) {
		n := int32(len(syms))
		if n > 0 {
			syms[n-1].next = n
		}
		syms = append(syms, symbol{id: uint32(id), prev: n - 1, next: -1})
	}
	unkID, haveUnk := 0, false
	for i := 0; i < len(word); {
		_, w := utf8.DecodeRune(word[i:])
		c := word[i : i+w]
		affixed := (i > 0 && b.prefix != "") || (i+w == len(word) && b.suffix != "")
		if affixed {
			s := string(c)
			if i > 0 {
				s = b.prefix + s
			}
			if i+w == len(word) {
				s += b.suffix
			}
			c = []byte(s)
		}
		i += w
		if id, ok := b.vocab[string(c)]; ok {
			if haveUnk {
				add(unkID)
				haveUnk = false
			}
			add(id)
			continue
		}
		// As in HF, a pending unknown token stays pending across byte
		// fallback tokens.
		if b.byteFallback && b.addByteFallback(c, add) {
			continue
		}
		if b.unkToken == "" {
			continue // dropped, as HF does without an unknown token
		}
		uid, ok := b.vocab[b.unkToken]
		if !ok {
			sc.syms = syms
			return nil, fmt.Errorf("model.unk_token %q is not in the vocabulary", b.unkToken)
		}
		switch {
		case haveUnk && b.fuseUnk:
		case haveUnk:
			add(unkID)
			unkID = uid
		default:
			unkID, haveUnk = uid, true
		}
	}
	if haveUnk {
		add(unkID)
	}
	sc.syms = syms
	b.mergeAll(syms, &sc.heap)
	return syms, nil
}

// addByteFallback adds <0xXX> tokens for every byte of s (prefix and suffix
// included, as HF does) if all of them are in the vocabulary.
func (b *bpe) addByteFallback(s []byte, add func(id int)) bool {
	for _, c := range s {
		if b.fallbackIDs[c] < 0 {
			return false
		}
	}
	for _, c := range s {
		add(b.fallbackIDs[c])
	}
	return true
}

// pendingMerge is a candidate merge of the symbol at pos with its successor.
type pendingMerge struct {
	pos   int32
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

// init orders h as a heap (Floyd's method, linear time).
func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *mergeHeap) pop() pendingMerge {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	s.down(0)
	*h = s
	return top
}

// down moves s[i] down to its place.
func (s mergeHeap) down(i int) {
	for {
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
}

// mergeAll repeatedly applies the lowest-ranked merge (leftmost on ties).
// Like HF, a queued merge is still applied after its neighbourhood changed
// if the current pair maps to the same new token; this matters only for
// vocabularies where two merge rules produce one token.
func (b *bpe) mergeAll(syms []symbol, heap *mergeHeap) {
	if len(syms) < 2 {
		return
	}
	h := (*heap)[:0]
	if cap(h) < len(syms) {
		h = make(mergeHeap, 0, len(syms)) // a long word: no doubling
	}
	defer func() { *heap = h[:0] }()
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[mergeKey(int(syms[i].id), int(syms[i+1].id))]; ok {
			h = append(h, pendingMerge{pos: int32(i), rank: m.rank, newID: m.newID})
		}
	}
	h.init()
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.prev == merged || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		m, ok := b.merges[mergeKey(int(cur.id), int(right.id))]
		if !ok || m.newID != top.newID {
			continue
		}
		cur.id = top.newID
		cur.next = right.next
		syms[nextPos].prev = merged
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if m, ok := b.merges[mergeKey(int(syms[cur.prev].id), int(cur.id))]; ok {
				h.push(pendingMerge{pos: cur.prev, rank: m.rank, newID: m.newID})
			}
		}
		if cur.next >= 0 {
			if m, ok := b.merges[mergeKey(int(cur.id), int(syms[cur.next].id))]; ok {
				h.push(pendingMerge{pos: top.pos, rank: m.rank, newID: m.newID})
			}
		}
	}
}

// resetCache empties the word cache (for benchmarks).
func (b *bpe) resetCache() {
	b.mu.Lock()
	b.cache = make(map[string][]uint32)
	b.mu.Unlock()
}
