package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchText is the "long_text" case of cases.json: about 2.9 KB of mixed
// English prose, Markdown, Go code, CJK, Arabic, Hebrew and emoji.
func benchText(b *testing.B) string {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(testdataDir, "cases.json"))
	require.NoError(b, err)
	var cases []struct{ Name, Text string }
	require.NoError(b, json.Unmarshal(data, &cases))
	for _, c := range cases {
		if c.Name == "long_text" {
			return c.Text
		}
	}
	b.Fatal("cases.json has no long_text case")
	return ""
}

func benchEncode(b *testing.B, cold bool) {
	tok := qwen3(b)
	text := benchText(b)
	ids, err := tok.Encode(text)
	require.NoError(b, err)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if cold {
			tok.resetCache()
		}
		if _, err := tok.Encode(text); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(len(ids)*b.N)/sec, "tokens/s")
	b.ReportMetric(float64(len(text)*b.N)/sec/1e6, "MB/s")
}

// BenchmarkEncode encodes the same text repeatedly, so BPE results come
// from the word cache after the first round (steady state for a chat).
func BenchmarkEncode(b *testing.B) { benchEncode(b, false) }

// BenchmarkEncodeCold empties the word cache before every round, so every
// word is merged from scratch.
func BenchmarkEncodeCold(b *testing.B) { benchEncode(b, true) }

// BenchmarkDecode decodes the ids of the same text.
func BenchmarkDecode(b *testing.B) {
	tok := qwen3(b)
	text := benchText(b)
	ids, err := tok.Encode(text)
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tok.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(len(ids)*b.N)/sec, "tokens/s")
	b.ReportMetric(float64(len(text)*b.N)/sec/1e6, "MB/s")
}
