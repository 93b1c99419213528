package tokenizer

import (
	"runtime"
	"strings"
	"time"
)

// The time limit of one Encode call is measured against the tokenizer's
// own speed: at load, the normalizer, the pre-tokenizer patterns and BPE
// encode a fixed calibration text once, timed in CPU time, and a call may
// then use EncodeFloor plus EncodeSpeedMultiple times that time per byte
// of its text. A pattern that is fast on ordinary text but backtracks on
// some input is stopped after a bounded multiple of its normal cost, and
// a slower machine gets a proportionally longer limit.
const (
	// EncodeFloor is the time every Encode call may use, however short
	// its text (it covers the clock's granularity and a call's fixed costs).
	EncodeFloor = 2 * time.Second
	// EncodeSpeedMultiple is how many times the calibrated time per byte
	// a call may use for each byte of its text. Qwen's tokenizer is about
	// three and a half times slower on its slowest text (digits) than on
	// the calibration text, so it keeps about a sixfold margin.
	EncodeSpeedMultiple = 20
	// minEncodeRate and maxEncodeRate bound the calibrated time per byte:
	// the floor keeps a clock that reads too little (or a tiny text's
	// noise) from making the limit useless, the cap keeps a tokenizer slow
	// on everything from earning hours (at the cap, a 64 MiB text may use
	// about 22 minutes). Qwen's tokenizer measures about 450 ns.
	minEncodeRate = 50 * time.Nanosecond
	maxEncodeRate = time.Microsecond
	// calibrationBudget bounds the calibration's own CPU time: a
	// tokenizer that cannot encode the text within it is charged
	// maxEncodeRate.
	calibrationBudget = 20 * time.Millisecond
)

// calibrationText is the fixed text the rate is measured on: English
// prose, code, digits, punctuation, whitespace runs, accented Latin, CJK
// and emoji, about 8 KB.
var calibrationText = func() string {
	const part = "The quick brown fox jumps over 13 lazy dogs; doesn't it? They'll say \"yes\" (maybe).\n" +
		"func f(x int) int {\n\treturn x*x + 42 // 3.14159\n}\r\n" +
		"Ünïcödé façade naïve café — 東京は日本の首都です。 数字 2026年12月6日 😀👍\n" +
		"    indented    text   with  runs of spaces, tabs\t\tand   newlines\n\n" +
		"https://example.com/path?q=a&b=c #tag @user $100.00 ~50% <div class=\"x\">ok</div>\n"
	return strings.Repeat(part, 8192/len(part)+1)
}()

// calibrate measures t's CPU time per byte on calibrationText, within
// calibrationBudget, and clamps it to [minEncodeRate, maxEncodeRate].
func (t *Tokenizer) calibrate() time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := maxEncodeRate
	for range 2 { // the first pass fills the BPE cache; the second is the steady speed
		e := &encoder{t: t, inputLen: len(calibrationText), limit: calibrationBudget, cpuStart: threadCPU()}
		e.ids.init(len(calibrationText) / 3)
		if t.added.split(&t.added.raw, calibrationText, e.rawPiece) != nil {
			return maxEncodeRate
		}
		best = min(best, (threadCPU()-e.cpuStart)/time.Duration(len(calibrationText)))
	}
	return max(best, minEncodeRate)
}

// EncodeRate is the CPU time per byte t took on the calibration text at
// load, within [50 ns, 1 µs]; EncodeTimeLimit is measured against it.
func (t *Tokenizer) EncodeRate() time.Duration { return max(t.rate, minEncodeRate) }

// EncodeTimeLimit is how much CPU time one Encode call of an n-byte text
// may use: EncodeFloor plus EncodeSpeedMultiple × EncodeRate per byte. It
// is CPU time, so a loaded machine does not bring a call nearer to it
// (where the system gives no per-thread CPU clock, wall time stands in).
// It is checked before each match of a pre-tokenizer pattern, so only a
// pattern much slower on the text than on ordinary text gets near it; the
// call then fails instead of running for hours.
func (t *Tokenizer) EncodeTimeLimit(n int) time.Duration {
	if encodeTimeLimit != nil {
		return encodeTimeLimit(n)
	}
	return EncodeFloor + time.Duration(n)*EncodeSpeedMultiple*t.EncodeRate()
}

// encodeTimeLimit, when set (by tests), replaces EncodeTimeLimit.
var encodeTimeLimit func(n int) time.Duration
