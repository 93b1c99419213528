package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

// fuzzLimits lowers the time limits for the rest of a fuzz target, so
// that an input with a slow pattern costs a fraction of a second.
func fuzzLimits(f *testing.F) {
	oldMatch, oldEncode := matchTimeout, encodeTimeLimit
	matchTimeout = 100 * time.Millisecond
	encodeTimeLimit = func(int) time.Duration { return 200 * time.Millisecond }
	f.Cleanup(func() { matchTimeout, encodeTimeLimit = oldMatch, oldEncode })
}

// qwen3Small is the real Qwen3 tokenizer.json with its vocabulary cut to
// the 256 byte-level runes and its merges to none: every section but the
// model is the real one, in 4 KB.
func qwen3Small(f *testing.F) []byte {
	gz, err := os.ReadFile(filepath.Join(testdataDir, "qwen3-tokenizer.json.gz"))
	require.NoError(f, err)
	data, err := gunzip(bytes.NewReader(gz), "test")
	require.NoError(f, err)
	var m map[string]any
	require.NoError(f, json.Unmarshal(data, &m))
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(ByteToUnicode(byte(b)))] = b
	}
	m["model"].(map[string]any)["vocab"] = vocab
	m["model"].(map[string]any)["merges"] = []any{}
	small, err := json.Marshal(m)
	require.NoError(f, err)
	return small
}

// checkMessage requires an error to be one short line: messages never
// repeat the text or a whole section of the file.
func checkMessage(t *testing.T, err error) {
	if err == nil {
		return
	}
	msg := err.Error()
	require.NotContains(t, msg, "\n", "one line")
	require.Less(t, len(msg), 2000, "short: %.300s", msg)
}

// FuzzLoad feeds arbitrary tokenizer.json contents (up to 256 KiB) to
// FromJSON. Loading must fail cleanly with a short one-line error or give
// a tokenizer that encodes and decodes without panicking; time limits are
// lowered so each input costs well under a second.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzLoad -fuzztime 60s
func FuzzLoad(f *testing.F) {
	fuzzLimits(f)
	f.Add(qwen3Small(f))
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
	f.Add([]byte(`{"model":{"vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"],["a","b"]]},"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKD"},{"type":"NFC"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 256<<10 {
			return
		}
		tok, err := FromJSON(data)
		checkMessage(t, err)
		if err != nil {
			require.Nil(t, tok)
			return
		}
		probe := []string{"", "a", "hello world", "  \t\n", "é中😀", "<|im_start|>x<|im_end|>"}
		for i, a := range tok.AddedTokens() {
			if i == 8 {
				break
			}
			probe = append(probe, a.Content, " "+a.Content+"x"+a.Content+" ")
		}
		for _, s := range probe {
			if !utf8.ValidString(s) {
				continue
			}
			ids, err := tok.Encode(s)
			checkMessage(t, err)
			if err != nil {
				continue // e.g. an unk_token missing from the vocabulary
			}
			_, err = tok.Decode(ids)
			require.NoError(t, err, "Encode gave an id Decode does not know")
		}
		_, _ = tok.Decode([]int{0, 1, 2, -1, tok.VocabSize()})
	})
}

// FuzzConfig puts arbitrary normalizer, pre_tokenizer and added_tokens
// sections (up to 16 KiB each) around a small byte-level vocabulary and
// encodes a short text with the result: the sections parse or fail with
// a short one-line error, and what loads encodes to ids it can decode.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzConfig -fuzztime 60s
func FuzzConfig(f *testing.F) {
	fuzzLimits(f)
	var real struct {
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		AddedTokens  json.RawMessage `json:"added_tokens"`
	}
	require.NoError(f, json.Unmarshal(qwen3Small(f), &real))
	f.Add(string(real.Normalizer), string(real.PreTokenizer), string(real.AddedTokens), "Hello <|im_start|>world 123\n")
	f.Add(`{"type":"NFKC"}`, `{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false}`,
		`[{"id":0,"content":"ab","single_word":true,"lstrip":true,"rstrip":false,"normalized":true,"special":false}]`, " ab ab")
	f.Add(`null`, `{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithNext","invert":true}`, `[]`, "a b  c")
	f.Fuzz(func(t *testing.T, normalizer, pre, added, text string) {
		if len(normalizer)+len(pre)+len(added) > 16<<10 || len(text) > 1<<10 || !utf8.ValidString(text) {
			return
		}
		var vocab strings.Builder
		vocab.WriteString("{")
		for b := range 256 {
			if b > 0 {
				vocab.WriteString(",")
			}
			key, _ := json.Marshal(string(ByteToUnicode(byte(b))))
			fmt.Fprintf(&vocab, "%s:%d", key, b)
		}
		vocab.WriteString("}")
		data := fmt.Sprintf(`{"model":{"vocab":%s,"merges":[]},"decoder":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false},"normalizer":%s,"pre_tokenizer":%s,"added_tokens":%s}`,
			vocab.String(), orNull(normalizer), orNull(pre), orNull(added))
		tok, err := FromJSON([]byte(data))
		checkMessage(t, err)
		if err != nil {
			return
		}
		ids, err := tok.Encode(text)
		checkMessage(t, err)
		if err != nil {
			return
		}
		_, err = tok.Decode(ids)
		require.NoError(t, err)
	})
}

func orNull(s string) string {
	if strings.TrimSpace(s) == "" {
		return "null"
	}
	return s
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
// text into spans that tile it (or runs out of time).
func FuzzRegex(f *testing.F) {
	fuzzLimits(f)
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
		if err != nil {
			require.Contains(t, err.Error(), "backtracks too much")
			return
		}
		pos := 0
		for _, sp := range spans {
			require.Equal(t, pos, sp.start)
			require.LessOrEqual(t, sp.start, sp.end)
			pos = sp.end
		}
		require.Equal(t, len(s), pos)
	})
}
