package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peakHeap runs f and returns how far the heap rose above where it was
// before: the GC is kept tight (10%) so the heap tracks what is live, and
// the heap is sampled every 2 ms. What f keeps (its result) counts.
func peakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var peak atomic.Uint64
	note := func() {
		if v := read(); v > peak.Load() {
			peak.Store(v)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			note()
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	note()
	return max(peak.Load(), base) - base
}

// englishText repeats the Apache License (English prose) to n bytes.
func englishText(t testing.TB, n int) string {
	data, err := os.ReadFile(filepath.Join(testdataDir, "qwen3-tokenizer.LICENSE-Apache-2.0"))
	require.NoError(t, err)
	return repeatTo(string(data), n)
}

// TestEncodeMemoryBounded encodes 4 MB texts with the Qwen3 tokenizer and
// bounds the heap they need per input byte. Before Encode streamed its
// words, 30 MB of English needed 1.8 GB (58 bytes per byte), 20 MB of
// digits 3.1 GB (150) and one 20 MB word 1.6 GB (77); the ids alone take
// 12 bytes per token while they are collected and returned.
func TestEncodeMemoryBounded(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("needs a few seconds of CPU and no race detector")
	}
	tok := qwen3(t)
	const n = 4 << 20
	for _, c := range []struct {
		name    string
		text    string
		perByte float64 // allowed heap bytes per input byte
	}{
		{"English", englishText(t, n), 8},
		{"digits", repeatTo("0123456789", n), 20},
		{"mixed", repeatTo("a1!  \n", n), 20},
		{"one word", strings.Repeat("a", n), 40},
		{"spaces", strings.Repeat(" ", n), 40},
	} {
		var ids []int
		var err error
		peak := peakHeap(func() { ids, err = tok.Encode(c.text) })
		require.NoError(t, err, c.name)
		require.NotEmpty(t, ids)
		per := float64(peak) / float64(len(c.text))
		t.Logf("%-8s %d bytes -> %d ids: heap peak %.1f MB, %.1f bytes per input byte", c.name, len(c.text), len(ids), float64(peak)/1e6, per)
		assert.Less(t, per, c.perByte, c.name)
	}
}

// TestSegmentedEncodeMatchesWhole checks that cutting text into segments
// changes no id: the Qwen3 tokenizer with 64 KiB segments and without any.
func TestSegmentedEncodeMatchesWhole(t *testing.T) {
	tok := qwen3(t)
	whole := *tok
	whole.cut = nil
	text := englishText(t, 300<<10) + repeatTo("12 345\n\n  x", 100<<10) + repeatTo("中文，\u0301e\u0301 ", 100<<10)
	got, err := tok.Encode(text)
	require.NoError(t, err)
	want, err := whole.Encode(text)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestHostileEncodeTextCap: a text over MaxEncodeBytes, or one that
// normalization takes over it, is refused before it is worked on.
func TestHostileEncodeTextCap(t *testing.T) {
	tok := qwen3(t)
	_, err := tok.Encode(strings.Repeat(" ", MaxEncodeBytes+1))
	assert.EqualError(t, err, fmt.Sprintf("tokenizer: encode: the text is %d bytes, over the limit of 64 MiB (see docs/limits.md)", MaxEncodeBytes+1))

	// NFKC spells out U+FDFA (3 bytes) in 33 bytes.
	m := tinyJSON(t, "bytelevel.json")
	m["normalizer"] = map[string]any{"type": "NFKC"}
	nfkc, err := fromMap(t, m)
	require.NoError(t, err)
	text := strings.Repeat("\ufdfa", MaxEncodeBytes/3/8)
	_, err = nfkc.Encode(text)
	assert.EqualError(t, err, fmt.Sprintf("tokenizer: encode: the %d-byte text is over the limit of 64 MiB once normalized (see docs/limits.md)", len(text)))
}

// hostileAdded writes a gzipped tokenizer.json with n added tokens of
// size bytes that share no prefix.
func hostileAdded(t *testing.T, n, size int) string {
	m := tinyJSON(t, "bytelevel.json")
	tokens := make([]any, n)
	pad := strings.Repeat("a", size-7)
	for i := range tokens {
		tokens[i] = map[string]any{"id": 0, "content": fmt.Sprintf("%07d", i) + pad, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true}
	}
	m["added_tokens"] = tokens
	data, err := json.Marshal(m)
	require.NoError(t, err)
	require.Less(t, len(data), MaxJSONBytes)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	path := filepath.Join(t.TempDir(), "tokenizer.json.gz")
	require.NoError(t, os.WriteFile(path, gz.Bytes(), 0o644))
	return path
}

// TestHostileAddedTokenTrie: 180,000 added tokens of 256 bytes fit in a
// 64 MiB tokenizer.json (1.1 MB gzipped) and needed 7.8 GB to load, with
// a byte trie of 46 million nodes. Their trie is now counted before it is
// built and refused; just under the limit, the flat trie loads in bounded
// memory and still finds every token.
func TestHostileAddedTokenTrie(t *testing.T) {
	if raceEnabled {
		t.Skip("builds tens of MB of JSON")
	}
	for _, n := range []int{180000, 17000} {
		path := hostileAdded(t, n, MaxAddedTokenBytes)
		var err error
		peak := peakHeap(func() { _, err = Load(path) })
		t.Logf("%d added tokens of %d bytes: heap peak %.0f MB", n, MaxAddedTokenBytes, float64(peak)/1e6)
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("added_tokens: %d tokens of %d bytes in all need a trie of", n, n*MaxAddedTokenBytes))
		assert.Contains(t, err.Error(), fmt.Sprintf("over the limit of %d", MaxAddedTrieNodes))
		assert.Less(t, peak, uint64(1<<30))
	}

	n := MaxAddedTrieNodes / MaxAddedTokenBytes
	path := hostileAdded(t, n, MaxAddedTokenBytes)
	var tok *Tokenizer
	var err error
	peak := peakHeap(func() { tok, err = Load(path) })
	require.NoError(t, err)
	t.Logf("%d added tokens of %d bytes: loaded, heap peak %.0f MB", n, MaxAddedTokenBytes, float64(peak)/1e6)
	assert.Less(t, peak, uint64(400<<20))
	last := tok.AddedTokens()[n-1]
	ids, err := tok.Encode("a" + last.Content + "a")
	require.NoError(t, err)
	assert.Equal(t, last.ID, ids[1])
}

// TestHostileConfigSections: the normalizer and pre_tokenizer sections are
// capped before anything is compiled from them. 857,805 Split steps in a
// 64 MiB file took 2.2 GB to load.
func TestHostileConfigSections(t *testing.T) {
	split := map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Isolated", "invert": false}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false}
	seq := func(key string, items ...any) map[string]any {
		return map[string]any{"type": "Sequence", key: items}
	}
	many := func(n int, v any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	nested := any(byteLevel)
	for range MaxSequenceDepth + 1 {
		nested = seq("pretokenizers", nested)
	}
	longPattern := map[string]any{"type": "Split", "pattern": map[string]any{"Regex": strings.Repeat("a", MaxPatternBytes/2+1)},
		"behavior": "Isolated", "invert": false}
	for _, c := range []struct {
		name, key string
		value     any
		want      string
	}{
		{"many steps", "pre_tokenizer", seq("pretokenizers", many(200000, split)...),
			"pre_tokenizer: 200000 pre-tokenizers, over the limit of 16"},
		{"many steps nested", "pre_tokenizer", seq("pretokenizers", many(9, seq("pretokenizers", split, split))...),
			"pre_tokenizer.pretokenizers[8].pretokenizers[0]: more than 16 pre-tokenizer steps in all"},
		{"two ByteLevel", "pre_tokenizer", seq("pretokenizers", byteLevel, byteLevel),
			"pre_tokenizer.pretokenizers[1]: a second ByteLevel pre-tokenizer"},
		{"deep", "pre_tokenizer", nested, "Sequences nested more than 4 deep"},
		{"long patterns", "pre_tokenizer", seq("pretokenizers", longPattern, longPattern),
			fmt.Sprintf("pre_tokenizer.pretokenizers[1].pattern: the patterns hold %d bytes in all, over the limit of 8192", MaxPatternBytes+2)},
		{"many normalizers", "normalizer", seq("normalizers", many(17, map[string]any{"type": "NFC"})...),
			"normalizer: 17 normalizers, over the limit of 16"},
	} {
		m := tinyJSON(t, "bytelevel.json")
		m[c.key] = c.value
		_, err := fromMap(t, m)
		assert.ErrorContains(t, err, c.want, c.name)
	}
}

// TestHostileLoadMemory loads tokenizer.json files made of one huge
// section, an eighth of MaxJSONBytes each, and bounds the heap per file
// byte: under 8, so a file at the cap stays under about 550 MB.
// (Before, a 64 MiB vocabulary took 970 MB and 6.4 million merges 1.2
// GB.) QWENREF_TOKENIZER_BIG=1 uses files at the cap instead.
func TestHostileLoadMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("needs seconds of CPU and no race detector")
	}
	size := MaxJSONBytes / 8
	if os.Getenv("QWENREF_TOKENIZER_BIG") == "1" {
		size = MaxJSONBytes - 1<<20
	}
	base := `{"model":{"type":"BPE","vocab":%s,"merges":%s}}`
	var vocab strings.Builder
	vocab.WriteString(`{"a":0,"aa":1`)
	for i := 2; vocab.Len() < size; i++ {
		fmt.Fprintf(&vocab, `,"%x":%d`, i, i)
	}
	vocab.WriteString("}")
	pairs := `[` + strings.Repeat(`["a","a"],`, size/10) + `["a","a"]]`
	lines := `[` + strings.Repeat(`"a a",`, size/6) + `"a a"]`
	for _, c := range []struct{ name, json string }{
		{"vocabulary", fmt.Sprintf(base, vocab.String(), "[]")},
		{"merge pairs", fmt.Sprintf(base, `{"a":0,"aa":1}`, pairs)},
		{"merge lines", fmt.Sprintf(base, `{"a":0,"aa":1}`, lines)},
	} {
		data := []byte(c.json)
		require.Less(t, len(data), MaxJSONBytes)
		var err error
		peak := peakHeap(func() { _, err = FromJSON(data) })
		require.NoError(t, err, c.name)
		per := float64(peak) / float64(len(data))
		t.Logf("%-11s %d bytes: heap peak %.0f MB, %.1f bytes per file byte", c.name, len(data), float64(peak)/1e6, per)
		assert.Less(t, per, 8.0, c.name)
	}
}
