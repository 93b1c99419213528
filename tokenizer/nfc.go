package tokenizer

import (
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// cgj is U+034F COMBINING GRAPHEME JOINER, which x/text/unicode/norm
// inserts after every 30 consecutive non-starters (UAX #15's Stream-Safe
// Text Format). HF tokenizers (Rust's unicode-normalization) does not, so
// text with such runs (zalgo text, long diacritic stacks) would normalise,
// and tokenise, differently.
const cgj = '\u034f'

// normalizeForm applies one normalization form exactly as UAX #15 defines
// it, without the stream-safe insertion. norm's result is used whenever it
// inserted nothing (checked by counting U+034F, which composition never
// removes); otherwise the text is decomposed, reordered and composed here
// on top of norm's per-rune data.
func normalizeForm(f norm.Form, s string) string {
	out := f.String(s)
	if strings.Count(out, string(cgj)) == strings.Count(s, string(cgj)) {
		return out
	}
	return normalizeSlow(f, s)
}

// normalizeSlow is UAX #15 itself: full decomposition, canonical ordering
// and (for NFC and NFKC) canonical composition.
func normalizeSlow(f norm.Form, s string) string {
	compat := f == norm.NFKC || f == norm.NFKD
	rs := decompose(s, compat)
	reorder(rs)
	if f == norm.NFC || f == norm.NFKC {
		rs = compose(rs)
	}
	return string(rs)
}

const (
	hangulS = 0xAC00
	hangulL = 0x1100
	hangulV = 0x1161
	hangulT = 0x11A7
	nV, nT  = 21, 28
	nS      = 19 * nV * nT
)

// decompose writes the full canonical (or compatibility) decomposition.
func decompose(s string, compat bool) []rune {
	d := norm.NFD
	if compat {
		d = norm.NFKD
	}
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r >= hangulS && r < hangulS+nS:
			si := r - hangulS
			out = append(out, hangulL+si/(nV*nT), hangulV+(si%(nV*nT))/nT)
			if t := si % nT; t != 0 {
				out = append(out, hangulT+t)
			}
		default:
			if dec := d.PropertiesString(s[i : i+n]).Decomposition(); dec != nil {
				for _, x := range string(dec) {
					out = append(out, x)
				}
			} else {
				out = append(out, r)
			}
		}
		i += n
	}
	return out
}

// ccc is a rune's canonical combining class.
func ccc(r rune) uint8 {
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	return norm.NFD.Properties(b[:n]).CCC()
}

// reorder sorts every run of non-starters by combining class, stably (the
// canonical ordering algorithm).
func reorder(rs []rune) {
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		run := rs[i:j]
		sort.SliceStable(run, func(a, b int) bool { return ccc(run[a]) < ccc(run[b]) })
		i = j
	}
}

// compose applies canonical composition to decomposed, reordered text.
func compose(rs []rune) []rune {
	if len(rs) == 0 {
		return rs
	}
	out := make([]rune, 0, len(rs))
	starter := -1 // index in out of the last starter
	var lastCCC int = -1
	for _, r := range rs {
		c := int(ccc(r))
		if starter >= 0 {
			blocked := lastCCC != -1 && (lastCCC == 0 || lastCCC >= c)
			if !blocked {
				if p, ok := primaryComposite(out[starter], r); ok {
					out[starter] = p
					continue
				}
			}
		}
		if c == 0 {
			starter = len(out)
			lastCCC = -1
		} else {
			lastCCC = c
		}
		out = append(out, r)
		if c == 0 {
			// A starter right after the last starter: composition with it
			// is tried above with lastCCC == -1 (adjacent).
			lastCCC = -1
		}
	}
	return out
}

// primaryComposite returns the composition of a starter and r, if any,
// asking norm (two runes never reach the stream-safe limit).
func primaryComposite(a, b rune) (rune, bool) {
	var buf [2 * utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], a)
	n += utf8.EncodeRune(buf[n:], b)
	out := norm.NFC.Bytes(buf[:n])
	r, size := utf8.DecodeRune(out)
	if size == len(out) && r != utf8.RuneError {
		return r, true
	}
	return 0, false
}
