package tokenizer

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
)

// MaxEncodeBytes caps the text one Encode call takes, before and after
// normalization. With Qwen's tokenizer, encoding needs about 3.5 bytes of
// memory per input byte for English and 13 for digits (the ids take 12
// bytes per token while they are collected and returned); text that is
// one long word needs about 31 (BPE merges the whole word at once, as HF
// does). At the cap that is at most about 2 GB. 64 MiB of English is
// about 14 million tokens.
const MaxEncodeBytes = 64 << 20

// segmentBytes is how much text (at least) goes through the pre-tokenizer
// at once when its pattern can be cut safely.
const segmentBytes = 64 << 10

// Encode returns the token ids of text. Added tokens found in the text
// (special ones like <|im_start|> included) become their ids. text must be
// valid UTF-8 and at most MaxEncodeBytes long, and the call must finish
// within t.EncodeTimeLimit(len(text)).
func (t *Tokenizer) Encode(text string) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("tokenizer: encode: text is not valid UTF-8 (first bad byte at offset %d)", firstInvalid(text))
	}
	if len(text) > MaxEncodeBytes {
		return nil, fmt.Errorf("tokenizer: encode: the text is %d bytes, over the limit of %d MiB (see docs/limits.md)", len(text), MaxEncodeBytes>>20)
	}
	// One thread for the call, so that its CPU clock measures this work.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e := t.newEncoder(len(text))
	if err := t.added.split(&t.added.raw, text, e.rawPiece); err != nil {
		return nil, fmt.Errorf("tokenizer: encode: %w", err)
	}
	return e.ids.ints(), nil
}

// encoder holds one Encode call's state: the ids so far, scratch space
// reused from word to word, and the time limit.
type encoder struct {
	t         *Tokenizer
	ids       idList
	inputLen  int
	normBytes int           // normalized text so far
	limit     time.Duration // of CPU time
	cpuStart  time.Duration // threadCPU at the start
	runes     [][]rune      // one buffer per pre-tokenizer step
	wordBuf   []byte        // the word BPE reads
	bpe       bpeScratch
	sink      func(word []byte) error // if set, takes the words instead of BPE (tests)
}

func (t *Tokenizer) newEncoder(n int) *encoder {
	e := &encoder{t: t, inputLen: n, limit: t.EncodeTimeLimit(n), cpuStart: threadCPU()}
	e.ids.init(n/3 + 1)
	return e
}

// rawPiece takes a stretch of raw text or a raw added token.
func (e *encoder) rawPiece(piece string, id int) error {
	if id >= 0 {
		e.ids.add(id)
		return nil
	}
	if e.t.normalize != nil {
		piece = e.t.normalize.apply(piece)
		// NFKC can make text 11 times longer: the cap holds for the result.
		if e.normBytes += len(piece); e.normBytes > MaxEncodeBytes {
			return fmt.Errorf("the %d-byte text is over the limit of %d MiB once normalized (see docs/limits.md)", e.inputLen, MaxEncodeBytes>>20)
		}
	}
	return e.t.added.split(&e.t.added.norm, piece, e.normPiece)
}

// normPiece takes a stretch of normalized text or a normalized added
// token. Where the first pre-tokenizer step allows it, the text goes on
// in segments of about segmentBytes cut where the step's output cannot
// change, so the memory used does not grow with the text.
func (e *encoder) normPiece(piece string, id int) error {
	if id >= 0 {
		e.ids.add(id)
		return nil
	}
	cut := e.t.cut
	for len(piece) > 0 {
		n := len(piece)
		if cut != nil {
			n = cut(piece, segmentBytes)
		}
		if err := e.pretok(0, piece[:n]); err != nil {
			return err
		}
		piece = piece[n:]
	}
	return nil
}

// pretok runs pre-tokenizer steps step, step+1, ... on w and BPE on each
// word they give. Steps work word by word, so the words are visited depth
// first, in the order HF's PreTokenizedString gives them.
func (e *encoder) pretok(step int, w string) error {
	pre := e.t.pre
	if step == len(pre) {
		e.wordBuf = append(slices.Grow(e.wordBuf[:0], len(w)), w...)
		return e.bpeWord()
	}
	st := &pre[step]
	next := func(piece string) error { return e.pretok(step+1, piece) }
	if !st.byteLevel {
		return st.re.split(e, step, w, st.behavior, st.invert, next)
	}
	if st.addPrefixSpace && !strings.HasPrefix(w, " ") {
		w = " " + w
	}
	mapped := func(piece string) error {
		if step+1 == len(pre) { // the usual last step: map into the BPE buffer
			e.wordBuf = appendByteLevel(e.wordBuf[:0], piece)
			return e.bpeWord()
		}
		return e.pretok(step+1, byteLevelEncode(piece))
	}
	if !st.useRegex {
		return mapped(w)
	}
	return gpt2Regex().split(e, step, w, behaviorIsolated, false, mapped)
}

// bpeWord adds the ids of the word in wordBuf.
func (e *encoder) bpeWord() error {
	if e.sink != nil {
		return e.sink(e.wordBuf)
	}
	return e.t.model.tokenizeWord(&e.ids, e.wordBuf, &e.bpe)
}

// runeBuf returns the rune buffer of a pre-tokenizer step.
func (e *encoder) runeBuf(step int) *[]rune {
	for len(e.runes) <= step {
		e.runes = append(e.runes, nil)
	}
	return &e.runes[step]
}

// timeError is the error for an Encode call past its time limit.
func (e *encoder) timeError(r *regex) error {
	return fmt.Errorf("pre-tokenizer pattern %s: encoding the %d-byte text used more than its limit of %v of %s (%v plus %d times this tokenizer's own speed, %v per byte, measured on a calibration text at load; see docs/limits.md)",
		safeio.Quote(r.pattern), e.inputLen, e.limit.Round(time.Millisecond), map[bool]string{true: "CPU time", false: "time"}[cpuClock],
		EncodeFloor, EncodeSpeedMultiple, e.t.EncodeRate())
}

// idList collects ids in chunks of fixed size, so a long text never
// copies its ids while they grow; ints makes the final []int.
type idList struct {
	full [][]uint32
	cur  []uint32
	n    int
}

const idChunk = 1 << 16

func (l *idList) init(hint int) { l.cur = make([]uint32, 0, min(hint, idChunk)) }

func (l *idList) add(id int) {
	if len(l.cur) == cap(l.cur) {
		if len(l.cur) > 0 {
			l.full = append(l.full, l.cur)
		}
		l.cur = make([]uint32, 0, idChunk)
	}
	l.cur = append(l.cur, uint32(id))
	l.n++
}

func (l *idList) addAll(ids []uint32) {
	for _, id := range ids {
		l.add(int(id))
	}
}

func (l *idList) ints() []int {
	out := make([]int, 0, l.n)
	for _, c := range l.full {
		for _, id := range c {
			out = append(out, int(id))
		}
	}
	for _, id := range l.cur {
		out = append(out, int(id))
	}
	return out
}

// clockStart is where threadCPU's wall-clock stand-in counts from.
var clockStart = time.Now()
