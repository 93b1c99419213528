package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

// FuzzLoad feeds arbitrary tokenizer.json contents to FromJSON. Loading
// must fail cleanly or give a tokenizer that encodes and decodes without
// panicking.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzLoad -fuzztime 60s
func FuzzLoad(f *testing.F) {
	gz, err := os.ReadFile(filepath.Join(testdataDir, "qwen3-tokenizer.json.gz"))
	require.NoError(f, err)
	real, err := gunzip(bytes.NewReader(gz), "test")
	require.NoError(f, err)
	f.Add(real)
	f.Add([]byte(smallJSON))
	tiny, err := filepath.Glob(filepath.Join(testdataDir, "tiny", "*.json"))
	require.NoError(f, err)
	for _, p := range tiny {
		data, err := os.ReadFile(p)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte(`{"model":{"vocab":{},"merges":[]}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":4294967295},"merges":[]},"added_tokens":[{"id":0,"content":"a","lstrip":true,"rstrip":true,"single_word":true,"normalized":true,"special":false}]}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?i)(?<n>s)|(?=a)|a*"},"behavior":"Contiguous","invert":true}}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?i)[^a-z]|[]s]"},"behavior":"Removed","invert":false}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromJSON(data)
		if err != nil {
			require.Nil(t, tok)
			return
		}
		probe := []string{"", "a", "hello world", "  \t\n", "é中😀", "<|im_start|>x<|im_end|>"}
		for _, a := range tok.AddedTokens() {
			probe = append(probe, a.Content, " "+a.Content+"x"+a.Content+" ")
		}
		for _, s := range probe {
			if !utf8.ValidString(s) {
				continue
			}
			ids, err := tok.Encode(s)
			if err != nil {
				continue // e.g. an unk_token missing from the vocabulary
			}
			_, _ = tok.Decode(ids)
		}
		_, _ = tok.Decode([]int{0, 1, 2, -1, tok.VocabSize()})
	})
}

// FuzzEncode encodes arbitrary strings with the Qwen3 tokenizer: invalid
// UTF-8 is an error, and otherwise decoding gives back NFC(s) whenever s
// holds no added token (an added token's neighbours are normalized
// separately).
//
//	go test ./tokenizer -run '^$' -fuzz FuzzEncode -fuzztime 60s
func FuzzEncode(f *testing.F) {
	tok := qwen3(f)
	data, err := os.ReadFile(filepath.Join(testdataDir, "cases.json"))
	require.NoError(f, err)
	var cases []struct{ Name, Text string }
	require.NoError(f, json.Unmarshal(data, &cases))
	for _, c := range cases {
		f.Add(c.Text)
	}
	f.Add("\xff\xfe")
	f.Add("a\xe4\xb8")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s)
		if !utf8.ValidString(s) {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		again, err := tok.Encode(s)
		require.NoError(t, err)
		require.Equal(t, ids, again, "cached and fresh encodings differ")
		dec, err := tok.Decode(ids)
		require.NoError(t, err)
		for _, a := range tok.AddedTokens() {
			if strings.Contains(s, a.Content) {
				return
			}
		}
		require.Equal(t, norm.NFC.String(s), dec)
	})
}

// FuzzRegex checks that any pattern either fails to compile or splits any
// text into spans that tile it.
func FuzzRegex(f *testing.F) {
	f.Add(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, "It'ſ 12 ok  \n")
	f.Add(`a*|(?=b)`, "baab")
	f.Add(`(?i)(?<x>σ)[s\]](?#c)\p{Ll}`, "Σsς]a")
	f.Add(`\`, "x")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if !utf8.ValidString(s) {
			return
		}
		re, err := compileRegex(pattern)
		if err != nil {
			return
		}
		spans, err := re.findMatches(s)
		require.NoError(t, err)
		pos := 0
		for _, sp := range spans {
			require.Equal(t, pos, sp.start)
			require.LessOrEqual(t, sp.start, sp.end)
			pos = sp.end
		}
		require.Equal(t, len(s), pos)
	})
}
