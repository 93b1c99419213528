package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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
// it runs for about 100 s). On ordinary text the pattern is fast, so its
// calibrated limit stops it within seconds; the error names the limit, the
// measured rate and the text's length, not the text.
func TestHostileSlowMatchesBoundedPerEncode(t *testing.T) {
	tok := withPattern(t, "(a|aa)+b|c")
	run := 24 // about 5 ms of backtracking per match
	if raceEnabled {
		run = 18 // the race detector makes it 10-20 times slower
	}
	text := strings.Repeat(strings.Repeat("a", run)+"c", 20000)
	limit := tok.EncodeTimeLimit(len(text))
	t.Logf("rate %v per byte, limit %v", tok.EncodeRate(), limit)
	if !raceEnabled { // the race detector slows the calibration as much as the work it measures
		assert.Less(t, limit, 5*time.Second, "this pattern is fast on the calibration text")
	}
	start := time.Now()
	_, err := encodeWithin(t, tok, text, 60*time.Second)
	took := time.Since(start)
	require.Error(t, err)
	t.Logf("stopped after %v: %v", took, err)
	assert.Contains(t, err.Error(), fmt.Sprintf(`pre-tokenizer pattern "(a|aa)+b|c": encoding the %d-byte text used more than its limit of %v of CPU time (2s plus 20 times this tokenizer's own speed, %v per byte, measured on a calibration text at load; see docs/limits.md)`,
		len(text), limit.Round(time.Millisecond), tok.EncodeRate()))
	assert.NotContains(t, err.Error(), "backtracks", "this limit is the call's, not one match's")
	assert.NotContains(t, err.Error(), "aaaa")
	assert.Less(t, len(err.Error()), 400)
}

// TestLegitimateTextWithinCalibratedLimit: Qwen's pattern over long
// ordinary text and over digits (its slowest text) stays inside the
// calibrated limit while other goroutines load the machine (the
// calibration ran unloaded); it uses under half of the limit.
func TestLegitimateTextWithinCalibratedLimit(t *testing.T) {
	if raceEnabled {
		t.Skip("slow under the race detector")
	}
	tok := qwen3(t)
	stop := make(chan struct{})
	defer close(stop)
	for range runtime.GOMAXPROCS(0) {
		go func() {
			x := make([]byte, 8<<20) // thrash the caches the encoder uses
			for i := 0; ; i += 64 {
				select {
				case <-stop:
					return
				default:
				}
				x[i%len(x)]++
			}
		}()
	}
	for _, text := range []string{repeatTo(calibrationText+" ", 1<<20), repeatTo("0123456789", 256<<10)} {
		runtime.LockOSThread()
		start := threadCPU()
		_, err := tok.Encode(text)
		used := threadCPU() - start
		runtime.UnlockOSThread()
		require.NoError(t, err)
		limit := tok.EncodeTimeLimit(len(text))
		t.Logf("%d bytes: %v of CPU time, limit %v (%.2f of it)", len(text), used, limit, float64(used)/float64(limit))
		assert.Less(t, float64(used), 0.5*float64(limit))
	}
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

// TestEncodeTimeLimit: the limit is the floor plus the multiple of the
// rate measured at load, and the calibration itself stays within its
// budget.
func TestEncodeTimeLimit(t *testing.T) {
	tok := qwen3(t)
	rate := tok.EncodeRate()
	t.Logf("Qwen's tokenizer: %v per byte on the calibration text", rate)
	assert.GreaterOrEqual(t, rate, minEncodeRate)
	assert.LessOrEqual(t, rate, maxEncodeRate)
	assert.Equal(t, EncodeFloor, tok.EncodeTimeLimit(0))
	assert.Equal(t, EncodeFloor+1_000_000*EncodeSpeedMultiple*rate, tok.EncodeTimeLimit(1_000_000))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	tok.calibrate()
	took := threadCPU() - start
	t.Logf("calibration: %v of CPU time", took)
	assert.Less(t, took, 2*calibrationBudget+10*time.Millisecond, "two passes, each within the budget")
}
