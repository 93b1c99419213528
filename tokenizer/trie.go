package tokenizer

import (
	"cmp"
	"fmt"
	"slices"
)

// MaxAddedTrieNodes caps the byte trie that finds added tokens: the sum,
// over both of its tries (raw and normalized tokens), of the added tokens'
// lengths once shared prefixes are counted once. A node takes 13 bytes, so
// the cap bounds the tries to about 55 MB. Qwen3's 26 added tokens need
// 279 nodes; 180,000 tokens of 256 bytes, which fit in a 64 MiB
// tokenizer.json, would need 46 million.
const MaxAddedTrieNodes = 1 << 22

// matchPattern is a string to find and the id it stands for.
type matchPattern struct {
	text string
	id   int
}

// matcher finds non-overlapping leftmost-longest occurrences of a set of
// strings, like the Aho-Corasick automaton HF uses, with a byte trie: the
// work at each text position is bounded by the longest token, not by how
// many tokens share a first byte. The trie is flat: the children of a node
// are consecutive entries of nodes, and labels holds the byte leading to
// each node, so the whole trie is two allocations sized before building.
type matcher struct {
	nodes  []trieNode // nodes[0] is the root
	labels []byte     // labels[i] is the byte on the edge into nodes[i]
	ids    []int      // ids[k-1] is the id of the pattern that trieNode.pattern k ends
	first  [256]bool  // bytes some token starts with, to skip the rest fast
	any    bool
}

// trieNode is one trie state: its children are nodes[kids : kids+nkids],
// sorted by label.
type trieNode struct {
	kids    uint32
	pattern uint32 // 1 + index into matcher.ids of the token ending here, or 0
	nkids   uint16
}

// child returns the node reached from n by byte b, or -1.
func (m *matcher) child(n int32, b byte) int32 {
	nd := &m.nodes[n]
	lo, hi := int(nd.kids), int(nd.kids)+int(nd.nkids)
	for lo < hi { // binary search without a closure: this is the hot loop
		mid := int(uint(lo+hi) >> 1)
		if m.labels[mid] < b {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < int(nd.kids)+int(nd.nkids) && m.labels[lo] == b {
		return int32(lo)
	}
	return -1
}

// trieNodes sorts ps by text (then id) and returns how many nodes their
// trie has, root included. Patterns are non-empty.
func trieNodes(ps []matchPattern) int {
	slices.SortFunc(ps, func(a, b matchPattern) int {
		if c := cmp.Compare(a.text, b.text); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	n := 1
	prev := ""
	for _, p := range ps {
		n += len(p.text) - commonPrefix(prev, p.text)
		prev = p.text
	}
	return n
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// newMatcher builds the trie of ps, which trieNodes has sorted and counted
// (nodes). Of several patterns with the same text the one with the lowest
// id is kept.
func newMatcher(ps []matchPattern, nodes int) matcher {
	m := matcher{nodes: make([]trieNode, 1, nodes), labels: make([]byte, 1, nodes)}
	ps = slices.CompactFunc(ps, func(a, b matchPattern) bool { return a.text == b.text })
	if len(ps) == 0 {
		return m
	}
	m.ids = make([]int, len(ps))
	for i, p := range ps {
		m.ids[i] = p.id
		m.first[p.text[0]] = true
	}
	m.any = true
	m.build(0, ps, 0, 0)
	return m
}

// build fills node n, which stands for the prefix of length depth shared
// by ps[lo:], ps being the patterns under it; offset is the index of ps[0]
// in the full sorted list. Recursion is at most one level per byte of the
// longest pattern.
func (m *matcher) build(n int, ps []matchPattern, offset, depth int) {
	if len(ps[0].text) == depth { // sorted: the pattern equal to the prefix comes first
		m.nodes[n].pattern = uint32(offset + 1)
		ps, offset = ps[1:], offset+1
	}
	groups := 0
	for i := range ps {
		if i == 0 || ps[i].text[depth] != ps[i-1].text[depth] {
			groups++
		}
	}
	if groups == 0 {
		return
	}
	first := len(m.nodes)
	m.nodes[n].kids, m.nodes[n].nkids = uint32(first), uint16(groups)
	for i := range ps {
		if i == 0 || ps[i].text[depth] != ps[i-1].text[depth] {
			m.nodes = append(m.nodes, trieNode{})
			m.labels = append(m.labels, ps[i].text[depth])
		}
	}
	child := first
	for lo := 0; lo < len(ps); child++ {
		hi := lo + 1
		for hi < len(ps) && ps[hi].text[depth] == ps[lo].text[depth] {
			hi++
		}
		m.build(child, ps[lo:hi], offset+lo, depth+1)
		lo = hi
	}
}

// next finds the leftmost-longest match at or after from.
func (m *matcher) next(s string, from int) (start, end, id int, ok bool) {
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		cur, best := int32(0), -1
		for j := i; j < len(s); j++ {
			if cur = m.child(cur, s[j]); cur < 0 {
				break
			}
			if p := m.nodes[cur].pattern; p != 0 {
				best, id = j+1, m.ids[p-1]
			}
		}
		if best >= 0 {
			return i, best, id, true
		}
	}
	return 0, 0, 0, false
}

// buildMatchers counts the nodes the raw and normalized tries need, refuses
// more than MaxAddedTrieNodes before allocating any, and builds both.
func buildMatchers(raw, normd []matchPattern) (matcher, matcher, error) {
	nr, nn := trieNodes(raw), trieNodes(normd)
	if nr+nn > MaxAddedTrieNodes {
		return matcher{}, matcher{}, fmt.Errorf("added_tokens: %d tokens of %d bytes in all need a trie of %d nodes to match them, over the limit of %d (see docs/limits.md)",
			len(raw)+len(normd), totalLen(raw)+totalLen(normd), nr+nn, MaxAddedTrieNodes)
	}
	return newMatcher(raw, nr), newMatcher(normd, nn), nil
}

func totalLen(ps []matchPattern) int {
	n := 0
	for _, p := range ps {
		n += len(p.text)
	}
	return n
}
