package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/safeio"
)

// withPattern returns the tiny Split tokenizer with pattern as its split.
func withPattern(t *testing.T, pattern string) *Tokenizer {
	t.Helper()
	m := tinyJSON(t, "split.json")
	m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": pattern}
	tok, err := fromMap(t, m)
	require.NoError(t, err)
	return tok
}

// encodeWithin runs Encode in the background and fails the test if it
// has not returned within limit (it may then still be running).
func encodeWithin(t *testing.T, tok *Tokenizer, text string, limit time.Duration) ([]int, error) {
	t.Helper()
	type result struct {
		ids []int
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := tok.Encode(text)
		done <- result{ids, err}
	}()
	select {
	case r := <-done:
		return r.ids, r.err
	case <-time.After(limit):
		t.Fatalf("Encode of %d bytes still running after %v", len(text), limit)
		return nil, nil
	}
}

// TestHostileSlowMatchesBoundedPerEncode: each match of this pattern
// backtracks for milliseconds, far below MatchTimeout, and the text holds
// 20,000 of them, so only a limit on the whole call stops it (without one
// it runs for minutes). The limit is lowered to 1 s here; the error names
// the text's length, not the text.
func TestHostileSlowMatchesBoundedPerEncode(t *testing.T) {
	tok := withPattern(t, "(a|aa)+b|c")
	defer func(f func(int) time.Duration) { encodeTimeLimit = f }(encodeTimeLimit)
	encodeTimeLimit = func(int) time.Duration { return time.Second }
	run := 24 // about 5 ms of backtracking per match
	if raceEnabled {
		run = 18 // the race detector makes it 10-20 times slower
	}
	text := strings.Repeat(strings.Repeat("a", run)+"c", 20000)
	start := time.Now()
	_, err := encodeWithin(t, tok, text, 60*time.Second)
	took := time.Since(start)
	require.Error(t, err)
	t.Logf("stopped after %v: %v", took, err)
	assert.Contains(t, err.Error(), fmt.Sprintf(`pre-tokenizer pattern "(a|aa)+b|c": encoding the %d-byte text used more than its limit of 1s of CPU time (see docs/limits.md)`, len(text)))
	assert.NotContains(t, err.Error(), "backtracks", "this limit is the call's, not one match's")
	assert.NotContains(t, err.Error(), "aaaa")
	assert.Less(t, len(err.Error()), 400)
}

// earlyTimeouts stands in for regexp2 with a lagging clock: its first
// calls fail at once with regexp2's timeout error.
type earlyTimeouts struct {
	re    *regexp2.Regexp
	early atomic.Int32
}

func (f *earlyTimeouts) FindRunesMatchStartingAt(r []rune, at int) (*regexp2.Match, error) {
	if f.early.Add(-1) >= 0 {
		return nil, errors.New("match timeout after 2s on input `" + string(r) + "`")
	}
	return f.re.FindRunesMatchStartingAt(r, at)
}

// TestEarlyRegexTimeoutRetried: regexp2 reads its timeout from a clock
// that a goroutine advances; on a loaded machine the clock lags and the
// timeout fires on matches that took microseconds (20 MB of digits failed
// with "the pattern backtracks too much"). A timeout that fires before the
// match used its CPU time is retried with a longer one, up to maxRetries
// times running.
func TestEarlyRegexTimeoutRetried(t *testing.T) {
	tok := qwen3(t)
	want, err := tok.Encode("Hello 123 world")
	require.NoError(t, err)
	re := tok.pre[0].re
	real := re.re.(*regexp2.Regexp)
	saved := re.longer
	defer func() { re.re, re.longer = real, saved }()

	fake := &earlyTimeouts{re: real}
	re.re = fake
	for i := range re.longer {
		re.longer[i] = fake
	}
	fake.early.Store(maxRetries)
	got, err := tok.Encode("Hello 123 world")
	require.NoError(t, err)
	assert.Equal(t, want, got)

	fake.early.Store(maxRetries + 1)
	_, err = tok.Encode("Hello 123 world")
	assert.EqualError(t, err, `tokenizer: encode: pre-tokenizer pattern `+safeio.Quote(re.pattern)+`: the regexp engine failed on the 15-byte text`)
}

// TestLongWordOnALoadedMachine: one match of Qwen's pattern over a long
// word takes a while by the wall clock, longer still on a loaded machine,
// while its CPU time stays far inside the match limit. Here regexp2's
// wall-clock timeout is 1 ms, so that it fires during the match as it
// does on a machine too loaded to schedule the match: a long run of marks
// or spaces is still one word (it was stopped as backtracking).
func TestLongWordOnALoadedMachine(t *testing.T) {
	if raceEnabled {
		t.Skip("slow under the race detector")
	}
	defer func(d time.Duration) { matchTimeout = d }(matchTimeout)
	matchTimeout = time.Millisecond
	tok, err := Load(filepath.Join(testdataDir, "qwen3-tokenizer.json.gz"))
	require.NoError(t, err)
	word := " " + strings.Repeat("!", 4<<20) // ` ?[^\s\p{L}\p{N}]+`
	words, err := preTokenize(tok.pre, word)
	require.NoError(t, err)
	require.Len(t, words, 1)
	assert.Len(t, words[0], len(word)+1, "one word: the space as Ġ (2 bytes) and the marks")
	spaces := "a" + strings.Repeat(" ", 4<<20) + "b" // `\s+(?!\S)`
	words, err = preTokenize(tok.pre, spaces)
	require.NoError(t, err)
	assert.Len(t, words, 3)
}

// TestDigitsEncode: a long run of digits, where Qwen's pattern makes
// every digit a word, encodes to one id per digit with no time-limit
// error. 2 MB by default; QWENREF_TOKENIZER_BIG=1 encodes 20 MB (about
// 15 s of CPU), as in the report of the false timeout.
func TestDigitsEncode(t *testing.T) {
	if raceEnabled {
		t.Skip("slow under the race detector")
	}
	n := 2 << 20
	if os.Getenv("QWENREF_TOKENIZER_BIG") == "1" {
		n = 20_000_000
	}
	tok := qwen3(t)
	text := repeatTo("0123456789", n)
	ids, err := tok.Encode(text)
	require.NoError(t, err)
	require.Equal(t, len(text), len(ids))
	var digit [10]int
	for d := range digit {
		id, ok := tok.TokenToID(fmt.Sprint(d))
		require.True(t, ok)
		digit[d] = id
	}
	for i, id := range ids {
		if id != digit[text[i]-'0'] {
			t.Fatalf("id %d at %d, want %d (digit %c)", id, i, digit[text[i]-'0'], text[i])
		}
	}
}

func TestEncodeTimeLimit(t *testing.T) {
	assert.Equal(t, 10*time.Second, EncodeTimeLimit(0))
	assert.Equal(t, 10*time.Second+20*time.Second, EncodeTimeLimit(1_000_000))
}
