//go:build unix

package tokenizer

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adversarial1MB are inputs built to make Qwen's pre-tokenizer pattern
// backtrack or the BPE merge loop work hard: one huge word, whitespace
// runs that the look-ahead `\s+(?!\S)` must give back a character of,
// digit and punctuation runs, alternations that defeat the cache.
var adversarial = map[string]string{
	"letters":          "a",
	"spaces":           " ",
	"spaces_then_word": "                               x",
	"newlines":         "\n",
	"crlf_spaces":      "\r\n \t",
	"digits":           "7",
	"punct":            "!",
	"apostrophes":      "'",
	"contraction_run":  "'s'S'll",
	"cjk":              "中",
	"marks":            "e\u0301",
	"emoji":            "\U0001F600",
	"mixed":            "a1!  \n",
}

// TestQwenPatternLinear encodes each adversarial input at two sizes, 4×
// apart, with the shipped Qwen3 tokenizer: the CPU time must grow about
// linearly (under 10×; a quadratic pattern gives 16×) and stay within
// seconds. It logs the timings. By default the sizes are 32 and 128 KiB;
// QWENREF_TOKENIZER_1MB=1 runs 256 KiB and 1 MiB (about 35 s on a loaded
// 2-core machine; figures in docs/limits.md).
func TestQwenPatternLinear(t *testing.T) {
	sizes := []int{32 << 10, 128 << 10}
	if os.Getenv("QWENREF_TOKENIZER_1MB") == "1" {
		sizes = []int{256 << 10, 1 << 20}
	}
	tok := qwen3(t)
	for name, unit := range adversarial {
		var secs [2]float64
		for i, n := range sizes {
			text := repeatTo(unit, n)
			secs[i] = 1e9
			for range 2 { // best of two: the first also fills the word cache
				start := cpuTime() // CPU, not wall time: the machine may be shared
				ids, err := tok.Encode(text)
				require.NoError(t, err, name)
				require.NotEmpty(t, ids)
				secs[i] = min(secs[i], (cpuTime() - start).Seconds())
			}
		}
		t.Logf("%-17s %d KiB %.3f s CPU, %d KiB %.3f s CPU (×%.1f)", name, sizes[0]>>10, secs[0], sizes[1]>>10, secs[1], secs[1]/secs[0])
		assert.Less(t, secs[1], 20.0, "%s: %d KiB took %.1f s", name, sizes[1]>>10, secs[1])
		if secs[1] > 0.05 { // ratios of tiny times are noise
			assert.Less(t, secs[1]/secs[0], 10.0, "%s grows faster than linearly", name)
		}
	}
}

func TestHostileTokenizerFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "tokenizer.json")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	done := make(chan error, 1)
	go func() { _, err := Load(fifo); done <- err }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), fifo)
		assert.Contains(t, err.Error(), "FIFO")
	case <-time.After(5 * time.Second):
		t.Fatal("Load blocked on a FIFO")
	}

	// A gzip bomb: 65 KiB that inflates past the cap stops at the cap.
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	chunk := make([]byte, 1<<20)
	for i := 0; i < MaxJSONBytes>>20+1; i++ {
		_, _ = zw.Write(chunk)
	}
	require.NoError(t, zw.Close())
	bomb := filepath.Join(dir, "bomb.json.gz")
	require.NoError(t, os.WriteFile(bomb, gz.Bytes(), 0o644))
	_, err := Load(bomb)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bomb)
	assert.Contains(t, err.Error(), "inflated")
	assert.Contains(t, err.Error(), "64 MiB")
	_, err = LoadGzip(bytes.NewReader(gz.Bytes()))
	assert.ErrorContains(t, err, "64 MiB")

	// An oversized plain file is refused before it is read.
	big := filepath.Join(dir, "big.json")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxJSONBytes+1))
	require.NoError(t, f.Close())
	_, err = Load(big)
	assert.ErrorContains(t, err, "tokenizer.json is larger than the limit of 64 MiB")
}

// A tokenizer-provided pattern that backtracks exponentially is stopped
// by the match timeout with an error naming the pattern and the text's
// length; regexp2's own message, which quotes the whole text, is not
// passed on.
func TestHostileBacktrackingPattern(t *testing.T) {
	tok := withPattern(t, "(a|aa)+$")
	start := cpuTime() // the limit is on CPU time: a loaded machine's wall clock runs on past it
	_, err := tok.Encode(strings.Repeat("a", 200) + "b")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pre-tokenizer pattern "(a|aa)+$": one match used more than its limit of 2s of CPU time in the 201-byte text (the pattern backtracks too much`)
	assert.NotContains(t, err.Error(), "aaaa")
	assert.Less(t, cpuTime()-start, MatchTimeout+5*time.Second)
}

func TestHostileDuplicateVocabIDs(t *testing.T) {
	m := tinyJSON(t, "split.json")
	vocab := m["model"].(map[string]any)["vocab"].(map[string]any)
	vocab["dup\x1b"] = vocab["a"]
	_, err := fromMap(t, m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "duplicate ids")
	assert.Contains(t, err.Error(), `"dup\x1b"`)
	assert.NotContains(t, err.Error(), "\x1b")
}

// addedTokens builds n added tokens sharing their first byte.
func addedTokens(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"id": 1000 + i, "content": fmt.Sprintf("<x%05d>", i), "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true}
	}
	return out
}

// 20k added tokens sharing a first byte took 7 s per 100 KB with the
// per-first-byte lists; the trie walks at most one token's length.
func TestHostileManyAddedTokens(t *testing.T) {
	m := tinyJSON(t, "bytelevel.json")
	m["added_tokens"] = addedTokens(20000)
	tok, err := fromMap(t, m)
	require.NoError(t, err)
	text := strings.Repeat("<x0001 <y", 100<<10/9)
	start := cpuTime()
	_, err = tok.Encode(text)
	require.NoError(t, err)
	took := cpuTime() - start
	t.Logf("100 KiB against 20,000 added tokens sharing '<': %v CPU", took)
	assert.Less(t, took, 2*time.Second)
	ids, err := tok.Encode("a<x00042>b<x19999>")
	require.NoError(t, err)
	assert.Contains(t, ids, tok.added.byContent["<x00042>"])
	assert.Contains(t, ids, tok.added.byContent["<x19999>"])
}

// FuzzAddedMatcher checks the trie against the obvious definition:
// leftmost start, then the longest token there.
func FuzzAddedMatcher(f *testing.F) {
	f.Add("ab|abc|b|bcd", "xxabcdabx")
	f.Add("<|im_start|>|<|im_end|>|<|", "<|im_start|>hi<|im_end|><|x")
	f.Add("a|aa|aaa", "aaaaaaa")
	f.Fuzz(func(t *testing.T, tokens, text string) {
		var ps []matchPattern
		seen := map[string]bool{}
		for i, p := range strings.Split(tokens, "|") {
			if p != "" && !seen[p] && len(ps) < 64 {
				seen[p] = true
				ps = append(ps, matchPattern{p, i})
			}
		}
		m := newMatcher(ps, trieNodes(ps))
		for from := 0; from <= len(text); from++ {
			s, e, id, ok := m.next(text, from)
			ws, we, wid, wok := naiveNext(ps, text, from)
			if ok != wok || ok && (s != ws || e != we || id != wid) {
				t.Fatalf("next(%q, %d) over %q = %d,%d,%d,%v; want %d,%d,%d,%v", text, from, tokens, s, e, id, ok, ws, we, wid, wok)
			}
		}
	})
}

func naiveNext(ps []matchPattern, s string, from int) (int, int, int, bool) {
	for i := from; i < len(s); i++ {
		best, id := -1, 0
		for _, p := range ps {
			if strings.HasPrefix(s[i:], p.text) && len(p.text) > best {
				best, id = len(p.text), p.id
			}
		}
		if best > 0 {
			return i, i + best, id, true
		}
	}
	return 0, 0, 0, false
}

// The trie's worst case is text × the longest added token: at the cap,
// a 1 MiB text that keeps almost matching must still encode in seconds;
// over the cap, Load refuses the tokenizer.
func TestHostileLongAddedToken(t *testing.T) {
	m := tinyJSON(t, "bytelevel.json")
	tokens := addedTokens(1)
	tokens[0].(map[string]any)["content"] = strings.Repeat("a", MaxAddedTokenBytes-1) + "b"
	m["added_tokens"] = tokens
	tok, err := fromMap(t, m)
	require.NoError(t, err)
	text := strings.Repeat("a", 1<<20)
	start, cpu0 := time.Now(), cpuTime()
	_, _, _, found := tok.added.raw.next(text, 0)
	took, cpu := time.Since(start), cpuTime()-cpu0
	require.False(t, found)
	t.Logf("1 MiB of near-matches against a %d-byte added token: %v wall, %v CPU", MaxAddedTokenBytes, took, cpu)
	limit := 4 * time.Second
	if raceEnabled {
		limit *= 15
	}
	assert.Less(t, cpu, limit, "CPU time (wall time on a shared machine says little)")

	tokens[0].(map[string]any)["content"] = strings.Repeat("a", MaxAddedTokenBytes+1)
	_, err = fromMap(t, m)
	assert.ErrorContains(t, err, fmt.Sprintf("added_tokens[0].content is %d bytes, over the limit of %d", MaxAddedTokenBytes+1, MaxAddedTokenBytes))
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
