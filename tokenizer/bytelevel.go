package tokenizer

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's byte-level alphabet: every byte value is given a
// printable stand-in so that BPE vocabularies never hold raw control bytes or
// spaces. Printable Latin-1 bytes stand for themselves; the other 68 bytes
// are mapped, in increasing order, to U+0100 onwards (space becomes 'Ġ',
// newline 'Ċ').
var byteToRune [256]rune

// runeToByte inverts byteToRune; only runes below 0x144 can be in the table.
var runeToByte map[rune]byte

// byteToString caches string(byteToRune[b]) for fast mapping.
var byteToString [256]string

func init() {
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
	}
	runeToByte = make(map[rune]byte, 256)
	for b := 0; b < 256; b++ {
		runeToByte[byteToRune[b]] = byte(b)
		byteToString[b] = string(byteToRune[b])
	}
}

// ByteToUnicode returns the printable rune that byte-level BPE uses for b.
func ByteToUnicode(b byte) rune { return byteToRune[b] }

// UnicodeToByte inverts ByteToUnicode; ok is false for runes outside the
// 256-entry alphabet.
func UnicodeToByte(r rune) (b byte, ok bool) {
	b, ok = runeToByte[r]
	return b, ok
}

// byteLevelEncode maps every byte of s to its stand-in rune.
func byteLevelEncode(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteToString[s[i]])
	}
	return sb.String()
}

// appendByteLevel appends the stand-in runes of the bytes of s to dst.
func appendByteLevel(dst []byte, s string) []byte {
	n := len(s)
	for i := 0; i < len(s); i++ {
		n += len(byteToString[s[i]]) - 1
	}
	dst = slices.Grow(dst, n) // exact: a word may be the whole text
	for i := 0; i < len(s); i++ {
		dst = append(dst, byteToString[s[i]]...)
	}
	return dst
}

// byteLevelDecodeToken appends the bytes token stands for. As in HF, a token
// with any rune outside the alphabet (an added token such as "hello world")
// is taken literally, as its UTF-8 bytes.
func byteLevelDecodeToken(dst []byte, token string) []byte {
	start := len(dst)
	for _, r := range token {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], token...)
		}
		dst = append(dst, b)
	}
	return dst
}

// lossyUTF8 converts b to a string, replacing each maximal ill-formed
// subsequence with one U+FFFD, exactly as Rust's String::from_utf8_lossy
// (and so HF's decoder) does. Go's own conversions differ: they replace
// every bad byte separately, or every run of bad bytes at once.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			sb.WriteByte(c)
			i++
			continue
		}
		need, lo, hi := utf8Expect(c)
		if need == 0 {
			sb.WriteRune(utf8.RuneError)
			i++
			continue
		}
		j := i + 1
		ok := true
		for k := 0; k < need; k++ {
			if j >= len(b) {
				ok = false
				break
			}
			x := b[j]
			if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
				ok = false
				break
			}
			j++
		}
		if ok {
			sb.Write(b[i:j])
		} else {
			sb.WriteRune(utf8.RuneError)
		}
		i = j
	}
	return sb.String()
}

// utf8Expect gives, for a non-ASCII lead byte, how many continuation bytes
// follow and the allowed range of the first one (which excludes overlongs,
// surrogates and values past U+10FFFF); need is 0 for bytes that can never
// start a sequence.
func utf8Expect(c byte) (need int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 1, 0x80, 0xBF
	case c == 0xE0:
		return 2, 0xA0, 0xBF
	case c == 0xED:
		return 2, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 2, 0x80, 0xBF
	case c == 0xF0:
		return 3, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 3, 0x80, 0xBF
	case c == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
}
