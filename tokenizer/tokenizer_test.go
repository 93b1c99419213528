package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallJSON is a minimal byte-level tokenizer: bytes a, b, space and the
// merge "a b", plus one special token.
const smallJSON = `{
 "version": "1.0",
 "added_tokens": [{"id": 4, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
   "normalized": false, "special": true}],
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
 "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false},
 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3}, "merges": ["a b"]}
}`

func TestSmallTokenizer(t *testing.T) {
	tok, err := FromJSON([]byte(smallJSON))
	require.NoError(t, err)
	ids, err := tok.Encode("ab a<s>b")
	require.NoError(t, err)
	assert.Equal(t, []int{3, 2, 0, 4, 1}, ids)
	text, err := tok.Decode(ids)
	require.NoError(t, err)
	assert.Equal(t, "ab a<s>b", text)
	assert.Equal(t, 5, tok.VocabSize())
	id, ok := tok.TokenToID("<s>")
	assert.True(t, ok)
	assert.Equal(t, 4, id)
	s, ok := tok.IDToToken(3)
	assert.True(t, ok)
	assert.Equal(t, "ab", s)
	_, ok = tok.IDToToken(5)
	assert.False(t, ok)
	_, ok = tok.TokenToID("zz")
	assert.False(t, ok)
	assert.True(t, tok.IsSpecial(4))
	assert.False(t, tok.IsSpecial(3))
}

func TestLoadPlainGzipAndReader(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "tokenizer.json")
	require.NoError(t, os.WriteFile(plain, []byte(smallJSON), 0o644))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte(smallJSON))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	gzPath := filepath.Join(dir, "tokenizer.json.gz")
	require.NoError(t, os.WriteFile(gzPath, gz.Bytes(), 0o644))
	// Gzip content is recognised by its magic bytes whatever the name.
	oddPath := filepath.Join(dir, "compressed.json")
	require.NoError(t, os.WriteFile(oddPath, gz.Bytes(), 0o644))

	for _, load := range []func() (*Tokenizer, error){
		func() (*Tokenizer, error) { return Load(plain) },
		func() (*Tokenizer, error) { return Load(gzPath) },
		func() (*Tokenizer, error) { return Load(oddPath) },
		func() (*Tokenizer, error) { return LoadGzip(bytes.NewReader(gz.Bytes())) },
	} {
		tok, err := load()
		require.NoError(t, err)
		ids, err := tok.Encode("aab")
		require.NoError(t, err)
		assert.Equal(t, []int{0, 3}, ids)
	}

	_, err = Load(filepath.Join(dir, "missing.json"))
	assert.ErrorContains(t, err, "missing.json")
	bad := filepath.Join(dir, "bad.json.gz")
	require.NoError(t, os.WriteFile(bad, []byte("not gzip"), 0o644))
	_, err = Load(bad)
	assert.ErrorContains(t, err, "gzip")
	_, err = LoadGzip(bytes.NewReader(gz.Bytes()[:20]))
	assert.ErrorContains(t, err, "gzip")
	broken := filepath.Join(dir, "broken.json")
	require.NoError(t, os.WriteFile(broken, []byte(`{"model":`), 0o644))
	_, err = Load(broken)
	assert.ErrorContains(t, err, "broken.json")
}

// patch returns smallJSON with one top-level or model field replaced
// (a nil value deletes it).
func patch(t *testing.T, section, key string, value any) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(smallJSON), &m))
	target := m
	if section != "" {
		target = m[section].(map[string]any)
	}
	if value == nil {
		delete(target, key)
	} else {
		target[key] = value
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// addedEntry is a complete added_tokens entry.
func addedEntry(content string, id int) map[string]any {
	return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false,
		"rstrip": false, "normalized": false, "special": false}
}

func TestFromJSONErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"bad json", []byte(`{"version": "1.0",`), "tokenizer: tokenizer.json: unexpected end of JSON input"},
		{"not an object", []byte(`[]`), "tokenizer: tokenizer.json: json: cannot unmarshal array"},
		{"version", patch(t, "", "version", "2.0"), `version "2.0"`},
		{"missing model", patch(t, "", "model", nil), "tokenizer: tokenizer.json: model: missing"},
		{"unknown model type", patch(t, "model", "type", "WordPiece"), `model.type "WordPiece": only BPE models are supported`},
		{"missing merges", patch(t, "model", "merges", nil), "model: missing vocab or merges"},
		{"mixed merges", patch(t, "model", "merges", []any{"a b", []string{"a", "b"}}), "model.merges: want a list"},
		{"merge triple", patch(t, "model", "merges", [][]string{{"a", "b", "c"}}), "model.merges[0]: want a pair"},
		{"merge line", patch(t, "model", "merges", []string{"ab"}), `model.merges[0]: "ab" is not two tokens`},
		{"merge oov", patch(t, "model", "merges", []string{"a c"}), `model.merges[0]: token "c" is not in the vocabulary`},
		{"negative id", patch(t, "model", "vocab", map[string]int{"a": -1}), `model.vocab["a"]: id -1`},
		{"huge id", patch(t, "model", "vocab", map[string]int64{"a": 1 << 33}), `model.vocab["a"]: id 8589934592`},
		{"fractional id", patch(t, "model", "vocab", map[string]float64{"a": 1.5}), "model: json: cannot unmarshal number 1.5"},
		{"dropout", patch(t, "model", "dropout", 0.1), "model.dropout 0.1: BPE dropout is not supported"},
		{"dropout range", patch(t, "model", "dropout", 2), "model.dropout 2: must be between 0 and 1"},
		{"unknown pre-tokenizer", patch(t, "", "pre_tokenizer", map[string]any{"type": "Whitespace"}), `pre_tokenizer.type "Whitespace": unsupported pre-tokenizer`},
		{"unknown normalizer", patch(t, "", "normalizer", map[string]any{"type": "Lowercase"}), `normalizer.type "Lowercase"`},
		{"unknown decoder", patch(t, "", "decoder", map[string]any{"type": "WordPiece"}), `decoder.type "WordPiece": unsupported decoder`},
		{"decoder without type", patch(t, "", "decoder", map[string]any{}), `decoder: missing "type"`},
		{"decoder flags", patch(t, "", "decoder", map[string]any{"type": "ByteLevel"}), `decoder: missing field "add_prefix_space"`},
		{"bad regex", patch(t, "", "pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]string{"Regex": "(?<"}, "behavior": "Isolated", "invert": false}), "pre_tokenizer.pattern:"},
		{"added id", patch(t, "", "added_tokens", []any{addedEntry("x", -3)}), "added_tokens[0].id -3"},
		{"added flag", patch(t, "", "added_tokens", []any{map[string]any{"id": 3, "content": "x", "single_word": false}}), `added_tokens[0]: missing field "lstrip"`},
	} {
		_, err := FromJSON(c.data)
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
}

func TestEncodeRejectsInvalidUTF8(t *testing.T) {
	tok, err := FromJSON([]byte(smallJSON))
	require.NoError(t, err)
	_, err = tok.Encode("ab\xffa")
	assert.EqualError(t, err, "tokenizer: encode: text is not valid UTF-8 (first bad byte at offset 2)")
	ids, err := tok.Encode("")
	require.NoError(t, err)
	assert.Empty(t, ids)
}

func TestDecodeUnknownID(t *testing.T) {
	tok := qwen3(t)
	_, err := tok.Decode([]int{9707, 151669})
	assert.EqualError(t, err, "tokenizer: decode: id 151669 (at position 1) is not in the vocabulary")
	_, err = tok.Decode([]int{-1})
	assert.EqualError(t, err, "tokenizer: decode: id -1 (at position 0) is not in the vocabulary")
	s, err := tok.Decode(nil)
	require.NoError(t, err)
	assert.Equal(t, "", s)
}

func TestDecodeWithoutDecoderJoinsWithSpaces(t *testing.T) {
	tok, err := FromJSON(patch(t, "", "decoder", nil))
	require.NoError(t, err)
	s, err := tok.Decode([]int{3, 2, 4})
	require.NoError(t, err)
	assert.Equal(t, "ab Ġ <s>", s)
}

func TestQwen3SpecialTokens(t *testing.T) {
	tok := qwen3(t)
	assert.Equal(t, 151669, tok.VocabSize())
	for content, want := range map[string]int{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<think>": 151667, "</think>": 151668} {
		id, ok := tok.TokenToID(content)
		assert.True(t, ok, content)
		assert.Equal(t, want, id, content)
	}
	special := tok.SpecialTokens()
	require.Len(t, special, 14)
	assert.Equal(t, "<|endoftext|>", special[0].Content)
	assert.Equal(t, "<|video_pad|>", special[13].Content)
	assert.Len(t, tok.AddedTokens(), 26)
	assert.True(t, tok.IsSpecial(151645))
	assert.False(t, tok.IsSpecial(151667), "<think> is an added token but not special")
	id, ok := tok.TokenToID("Ġthe")
	assert.True(t, ok)
	back, ok := tok.IDToToken(id)
	assert.True(t, ok)
	assert.Equal(t, "Ġthe", back)
}

func TestEncodeConcurrent(t *testing.T) {
	tok := qwen3(t)
	cases := loadExpected(t).Suites[0].Cases
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(cases); i += 2 {
				ids, err := tok.Encode(cases[i].Text)
				if !assert.NoError(t, err) || !assert.Equal(t, cases[i].IDs, ids, cases[i].Name) {
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// A tokenizer.json with invalid UTF-8 or an escaped lone surrogate is
// refused, as HF refuses it, instead of each becoming U+FFFD: two such
// vocabulary entries would silently become one, and an added token would
// match U+FFFD in the text.
func TestLoadRefusesBadUnicode(t *testing.T) {
	for name, c := range map[string]struct{ from, to, want string }{
		"lone high surrogate": {`"<s>"`, `"\ud800"`, `lone surrogate \ud800 in a string at byte`},
		"lone low surrogate":  {`"ab": 3`, `"\udc00": 3`, `lone surrogate \udc00`},
		"high, then no low":   {`"<s>"`, `"\ud800\u0041"`, `lone surrogate \ud800`},
		"invalid UTF-8":       {`"<s>"`, "\"\xff\"", "invalid UTF-8 at byte"},
	} {
		src := strings.Replace(smallJSON, c.from, c.to, 1)
		require.NotEqual(t, smallJSON, src, name)
		_, err := FromJSON([]byte(src))
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), c.want, name)
		}
	}
	// A pair is one character, and an escaped backslash is no escape.
	for _, content := range []string{`"\ud83d\ude00"`, `"\\ud800"`, `"\\\\"`, `"\ufffd"`} {
		_, err := FromJSON([]byte(strings.Replace(smallJSON, `"<s>"`, content, 1)))
		assert.NoError(t, err, content)
	}
}
