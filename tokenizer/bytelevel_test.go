package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestByteLevelTable(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := ByteToUnicode(byte(b))
		require.False(t, seen[r], "rune %U used twice", r)
		seen[r] = true
		back, ok := UnicodeToByte(r)
		require.True(t, ok)
		require.Equal(t, byte(b), back)
	}
	// Printable Latin-1 stands for itself; the rest is shifted past U+00FF
	// in byte order.
	assert.Equal(t, 'A', ByteToUnicode('A'))
	assert.Equal(t, '~', ByteToUnicode('~'))
	assert.Equal(t, 'é', ByteToUnicode(0xE9))
	assert.Equal(t, rune(0x100), ByteToUnicode(0x00))
	assert.Equal(t, 'Ġ', ByteToUnicode(' '))
	assert.Equal(t, 'Ċ', ByteToUnicode('\n'))
	assert.Equal(t, 'ĉ', ByteToUnicode('\t'))
	assert.Equal(t, 'ġ', ByteToUnicode(0x7F))
	assert.Equal(t, rune(0x122), ByteToUnicode(0x80))
	assert.Equal(t, 'Ń', ByteToUnicode(0xAD))
	_, ok := UnicodeToByte(' ')
	assert.False(t, ok, "a plain space is not in the alphabet")
	_, ok = UnicodeToByte('中')
	assert.False(t, ok)
}

func TestByteLevelEncode(t *testing.T) {
	assert.Equal(t, "ĠhelloĊ", byteLevelEncode(" hello\n"))
	assert.Equal(t, "ä¸Ń", byteLevelEncode("中"))
	assert.Equal(t, "", byteLevelEncode(""))
}

func TestByteLevelDecodeToken(t *testing.T) {
	assert.Equal(t, " hi", string(byteLevelDecodeToken(nil, "Ġhi")))
	assert.Equal(t, "中", string(byteLevelDecodeToken(nil, "ä¸Ń")))
	assert.Equal(t, "<|im_end|>", string(byteLevelDecodeToken(nil, "<|im_end|>")))
	// A rune outside the alphabet makes the whole token literal.
	assert.Equal(t, "hello world", string(byteLevelDecodeToken(nil, "hello world")))
	assert.Equal(t, "xĠ中", string(byteLevelDecodeToken([]byte("x"), "Ġ中")))
}

func TestLossyUTF8(t *testing.T) {
	const r = "\uFFFD"
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"é中😀", "é中😀"},
		{"\xc3", r},
		{"\xc3\xa9", "é"},
		{"\xf0\x9f\x98", r},                 // truncated 4-byte sequence: one
		{"\xf0\x9f\x98a", r + "a"},          // ... also when followed by ASCII
		{"\x80\x80", r + r},                 // lone continuation bytes: one each
		{"\xc0\x80", r + r},                 // C0 never starts a sequence
		{"\xed\xa0\x80", r + r + r},         // surrogates are rejected at A0
		{"\xe0\x80\x80", r + r + r},         // overlong 3-byte form
		{"\xf4\x90\x80\x80", r + r + r + r}, // above U+10FFFF
		{"\xf5a", r + "a"},
		{"\xff", r},
		{"\xe4\xb8a", r + "a"},
		{"\xf0\x9f\xe4\xb8\xad", r + "中"},
		{"a\xe4\xb8", "a" + r},
	} {
		assert.Equal(t, c.want, lossyUTF8([]byte(c.in)), "%q", c.in)
	}
}
