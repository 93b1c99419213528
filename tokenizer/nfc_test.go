package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

var forms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

// Where norm inserts nothing, the hand-written UAX #15 path must agree with
// it exactly: every single code point, and random mixes of starters,
// marks of several classes, Hangul and compatibility characters.
func TestNormalizeSlowMatchesNormWithoutLongRuns(t *testing.T) {
	for name, f := range forms {
		for r := rune(0); r <= 0x10FFFF; r++ {
			if r >= 0xD800 && r < 0xE000 {
				continue
			}
			s := string(r)
			if got, want := normalizeSlow(f, s), f.String(s); got != want {
				t.Fatalf("%s(U+%04X) = %q, norm gives %q", name, r, got, want)
			}
		}
	}
	atoms := []string{"a", "e", "A", "o", "\u0301", "\u0316", "\u0323", "\u0308", "\u031b", "\u0345", "\u05b0",
		"\u1100", "\u1161", "\u11a8", "\uac00", "\u00e9", "\u212b", "\ufb01", "\u2126", "\u0f73", "\u0fb2\u0f80",
		"\u3099", "\u304b", "\u1e9b", " ", "\u0e33", "\u0344", "\u0958", "\u09cb", "\U0001d15e", "\u0340"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := rng.IntN(12); n >= 0; n-- {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		s := b.String()
		for name, f := range forms {
			if got, want := normalizeSlow(f, s), f.String(s); got != want {
				t.Fatalf("%s(%+q) = %+q, norm gives %+q", name, s, got, want)
			}
		}
	}
}

// Past 30 combining marks norm inserts U+034F; HF does not, and neither
// does the normalizer here.
func TestNormalizeLongRunsWithoutCGJ(t *testing.T) {
	in := "e" + strings.Repeat("\u0301", 40)
	require.Contains(t, norm.NFC.String(in), "\u034f", "norm's stream-safe insertion (the reason for this code)")
	assert.Equal(t, "\u00e9"+strings.Repeat("\u0301", 39), normalizeForm(norm.NFC, in))
	// A ring above after 40 below-marks still composes with the A (not blocked).
	in = "A" + strings.Repeat("\u0316", 40) + "\u030a"
	assert.Equal(t, "\u00c5"+strings.Repeat("\u0316", 40), normalizeForm(norm.NFC, in))
	// Reordering works across the whole run, as UAX #15 orders it.
	in = "o" + strings.Repeat("\u0301\u0323", 20)
	assert.Equal(t, "\u1ecd"+strings.Repeat("\u0323", 19)+strings.Repeat("\u0301", 20), normalizeForm(norm.NFC, in))
	assert.NotContains(t, normalizeForm(norm.NFD, in), "\u034f")
	// Linear enough: 100k marks in well under a second.
	long := "a" + strings.Repeat("\u0301\u0316", 50000)
	assert.NotContains(t, normalizeForm(norm.NFKC, long), "\u034f")
}

// TestNFCMatchesHFOnCombiningRuns checks the Qwen3 tokenizer against HF
// tokenizers on long combining-mark runs (nfc/nfc-combining.json, written
// by testdata/gen/gen_tokenizer_ids.py --nfc-only): the ids, and the
// normalized text where HF reported it.
func TestNFCMatchesHFOnCombiningRuns(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testdataDir, "nfc", "nfc-combining.json"))
	require.NoError(t, err)
	var f struct {
		TokenizersVersion string `json:"tokenizers_version"`
		SHA               string `json:"tokenizer_json_sha256"`
		Cases             []struct {
			Name, Text string
			IDs        []int
			Normalized *string
		}
	}
	require.NoError(t, json.Unmarshal(data, &f))
	require.NotEmpty(t, f.Cases)
	tok := qwen3(t)
	longRuns := 0
	for _, c := range f.Cases {
		got, err := tok.Encode(c.Text)
		require.NoError(t, err, c.Name)
		assert.Equal(t, c.IDs, got, c.Name)
		if c.Normalized != nil {
			assert.Equal(t, *c.Normalized, tok.normalize.apply(c.Text), c.Name)
		}
		if strings.Contains(norm.NFC.String(c.Text), "\u034f") && !strings.Contains(c.Text, "\u034f") {
			longRuns++
		}
	}
	assert.Greater(t, longRuns, 10, "the file must exercise runs past norm's stream-safe limit")
}
