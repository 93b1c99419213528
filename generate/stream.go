package generate

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// TextCodec turns text into token ids and back: a tokenizer.
type TextCodec interface {
	Encode(text string) ([]int, error)
	Decode(ids []int) (string, error)
}

// TextStream turns tokens into text as they are generated. Each Add returns
// the text its token adds, holding back a tail that is not yet whole UTF-8
// (a character split over tokens); Flush returns what is left. An id the
// codec cannot decode on its own (a padded vocabulary's) adds no text.
type TextStream struct {
	Codec TextCodec
	ids   []int
	done  string
}

// Add appends a token and returns the text that is now complete.
func (s *TextStream) Add(id int) string {
	if _, err := s.Codec.Decode([]int{id}); err != nil {
		return ""
	}
	s.ids = append(s.ids, id)
	text, err := s.Codec.Decode(s.ids)
	if err != nil || strings.HasSuffix(text, string(utf8.RuneError)) {
		return ""
	}
	return s.advance(text)
}

// Flush returns the text not returned yet, an incomplete tail included.
func (s *TextStream) Flush() string {
	text, err := s.Codec.Decode(s.ids)
	if err != nil {
		return ""
	}
	return s.advance(text)
}

// Text is the whole text so far (it counts as returned).
func (s *TextStream) Text() string {
	s.Flush()
	return s.done
}

func (s *TextStream) advance(text string) string {
	if !strings.HasPrefix(text, s.done) {
		return ""
	}
	out := text[len(s.done):]
	s.done = text
	return out
}

// String is the run's speed in one line: prefill, decode and why it
// stopped.
func (res *GenerateResult) String() string {
	pre := float64(res.PrefillTokens) / res.PrefillTime.Seconds()
	s := fmt.Sprintf("prefill %d tok in %v (%.1f tok/s)", res.PrefillTokens, res.PrefillTime.Round(time.Microsecond), pre)
	if steps := len(res.NewIDs) - 1; steps > 0 {
		s += fmt.Sprintf(" · decode %d tok in %v (%.1f tok/s)", steps, res.DecodeTime.Round(time.Microsecond), float64(steps)/res.DecodeTime.Seconds())
	}
	return s + " · stop: " + res.StopReason
}
