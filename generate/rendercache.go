package generate

import (
	"slices"
	"strings"

	"github.com/qwenref/qwenref/tokenizer"
)

// specialLister is what a codec offers for the render cache: its special
// added tokens (tokenizer.Tokenizer has them).
type specialLister interface {
	SpecialTokens() []tokenizer.AddedToken
}

// renderCache keeps the last rendered conversation and its ids, so that a
// turn tokenizes only what changed: a tokenizer splits its text at added
// tokens and encodes the pieces between them alone, so the ids of the
// text before a special token do not depend on what follows it. The
// render is encoded piece by piece, cut before every special token, and a
// new render keeps the pieces of the common text up to the last cut whose
// token it still starts with.
type renderCache struct {
	specials []string // the special tokens' text; nil: no cache
	text     string
	ids      []int
	cuts     []cut // ascending; cuts[0] is the start
}

// cut is a piece's start: its byte offset, the ids before it, and the
// length of the special token it starts with (0 at the text's start).
type cut struct{ at, n, tok int }

// newRenderCache caches for codec when it lists its special tokens; the
// tokens that strip whitespace or match normalized text are left out, as
// their matches depend on the text around them.
func newRenderCache(codec TextCodec) *renderCache {
	rc := &renderCache{}
	if sl, ok := codec.(specialLister); ok {
		for _, a := range sl.SpecialTokens() {
			if a.Content != "" && !a.LStrip && !a.RStrip && !a.Normalized {
				rc.specials = append(rc.specials, a.Content)
			}
		}
	}
	return rc
}

// encode returns text's ids, equal to codec.Encode(text), encoding only
// the pieces from the last reusable cut on.
func (rc *renderCache) encode(codec TextCodec, text string) ([]int, error) {
	if len(rc.specials) == 0 {
		ids, err := codec.Encode(text)
		rc.text, rc.ids = text, ids
		return slices.Clone(ids), err
	}
	p := 0
	for p < len(rc.text) && p < len(text) && rc.text[p] == text[p] {
		p++
	}
	keep := 0
	for i := len(rc.cuts) - 1; i > 0; i-- {
		if c := rc.cuts[i]; c.at+c.tok <= p {
			keep = i
			break
		}
	}
	start := cut{}
	if keep > 0 {
		start = rc.cuts[keep]
	}
	ids := slices.Clone(rc.ids[:start.n])
	cuts := append(slices.Clone(rc.cuts[:keep]), start)
	next := make([]int, len(rc.specials)) // each token's next match at or after from
	for i := range next {
		next[i] = -1
	}
	pos := start.at
	for pos < len(text) {
		from := pos + cuts[len(cuts)-1].tok
		end, tok := len(text), 0
		for i, s := range rc.specials {
			if next[i] != len(text) && next[i] < from {
				if j := strings.Index(text[from:], s); j >= 0 {
					next[i] = from + j
				} else {
					next[i] = len(text)
				}
			}
			if next[i] < end || next[i] == end && end < len(text) && len(s) > tok {
				end, tok = next[i], len(s)
			}
		}
		if end > pos {
			piece, err := codec.Encode(text[pos:end])
			if err != nil {
				rc.text, rc.ids, rc.cuts = "", nil, nil
				return nil, err
			}
			ids = append(ids, piece...)
		}
		if end < len(text) {
			cuts = append(cuts, cut{at: end, n: len(ids), tok: tok})
		}
		pos = end
	}
	rc.text, rc.ids, rc.cuts = text, ids, cuts
	return slices.Clone(ids), nil
}
