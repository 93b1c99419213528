package generate

import (
	"fmt"
	"strings"
)

// The reasoning modes of ChatIO.Reasoning.
const (
	ReasoningShow = "show" // apart from the answer: dimmed on a terminal, labelled elsewhere
	ReasoningHide = "hide" // left out of what is printed (the history keeps it)
	ReasoningRaw  = "raw"  // as generated, its tags included
)

// The tags of a reasoning block, as Qwen's templates write them.
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
)

// OpensReasoning reports whether a rendered prompt leaves its reply inside
// a reasoning block: its last ThinkOpen comes after its last ThinkClose.
func OpensReasoning(prompt string) bool {
	return strings.LastIndex(prompt, ThinkOpen) > strings.LastIndex(prompt, ThinkClose)
}

// CheckReasoning refuses a mode that is none of the three.
func CheckReasoning(mode string) error {
	switch mode {
	case ReasoningShow, ReasoningHide, ReasoningRaw:
		return nil
	}
	return fmt.Errorf("--reasoning must be %s, %s or %s, got %q", ReasoningShow, ReasoningHide, ReasoningRaw, mode)
}

// reasoningFilter splits a streamed reply into reasoning and answer at the
// think tags, holding back a tail that may be the start of a tag, and
// prints each part as its mode says.
type reasoningFilter struct {
	mode    string
	dim     bool // a terminal: dim the reasoning, no labels
	in      bool // inside a reasoning block
	trim    bool // drop the newlines that follow a tag
	shown   bool // some reasoning was printed
	label   bool // the answer's label or separator is due
	pending string
	last    byte
	write   func(string)
}

func newReasoningFilter(mode string, dim, in bool, write func(string)) *reasoningFilter {
	return &reasoningFilter{mode: mode, dim: dim, in: in, trim: in, write: write}
}

// Add takes the next piece of the reply's text.
func (f *reasoningFilter) Add(s string) {
	if f.mode == ReasoningRaw {
		f.out(s)
		return
	}
	buf := f.pending + s
	f.pending = ""
	for {
		tag := ThinkOpen
		if f.in {
			tag = ThinkClose
		}
		if i := strings.Index(buf, tag); i >= 0 {
			f.emit(buf[:i])
			f.in, f.trim, buf = !f.in, true, buf[i+len(tag):]
			continue
		}
		keep := 0
		for n := min(len(tag)-1, len(buf)); n > 0; n-- {
			if strings.HasSuffix(buf, tag[:n]) {
				keep = n
				break
			}
		}
		f.emit(buf[:len(buf)-keep])
		f.pending = buf[len(buf)-keep:]
		return
	}
}

// Flush prints what was held back and closes the reasoning's styling.
func (f *reasoningFilter) Flush() {
	if f.pending != "" {
		p := f.pending
		f.pending = ""
		f.emit(p)
	}
}

func (f *reasoningFilter) emit(s string) {
	if f.trim {
		s = strings.TrimLeft(s, "\n")
		if s == "" {
			return
		}
		f.trim = false
	}
	if s == "" {
		return
	}
	if f.in {
		if f.mode == ReasoningHide {
			return
		}
		if !f.shown && !f.dim {
			f.out("Reasoning:\n")
		}
		f.shown, f.label, f.last = true, true, s[len(s)-1]
		if f.dim {
			s = "\x1b[2m" + s + "\x1b[22m" // each piece closed: a stop leaves no dim behind
		}
		f.write(s)
		return
	}
	if f.label {
		f.label = false
		if f.last != '\n' {
			f.out("\n")
		}
		if f.dim {
			f.out("\n")
		} else {
			f.out("\nAnswer:\n")
		}
	}
	f.out(s)
}

func (f *reasoningFilter) out(s string) {
	if s != "" {
		f.last = s[len(s)-1]
		f.write(s)
	}
}
