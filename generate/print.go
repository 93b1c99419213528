package generate

import (
	"fmt"
	"io"
	"slices"

	"github.com/qwenref/qwenref/model"
)

// PrintOptions say how a Printer shows a continuation.
type PrintOptions struct {
	// TopProbs > 0 prints a line per token instead of the text: the token
	// and its TopProbs most likely tokens with their probabilities.
	TopProbs int
	// Reasoning, when set, shows the text as Chat shows a reply: the
	// reasoning apart from the answer as the mode says (ReasoningShow,
	// ReasoningHide or ReasoningRaw; see CheckReasoning), and the EOS
	// tokens' text left out. "" writes the text as generated.
	Reasoning string
	// Dim says Out takes ANSI styling (a terminal); InReasoning, that the
	// prompt leaves the reply inside a reasoning block (OpensReasoning).
	Dim, InReasoning bool
	// EOS are the end-of-turn ids whose text Reasoning leaves out.
	EOS []int
}

// Printer writes a continuation to Out as its tokens come (Token is a
// GenerateOptions.OnToken), and a newline after it (Close).
type Printer struct {
	codec TextCodec
	out   *firstError
	o     PrintOptions
	text  *TextStream
	split *reasoningFilter // nil: the text as generated
}

// NewPrinter writes the tokens codec decodes to out, as o says.
func NewPrinter(codec TextCodec, out io.Writer, o PrintOptions) *Printer {
	p := &Printer{codec: codec, out: &firstError{w: out}, o: o, text: &TextStream{Codec: codec}}
	if o.Reasoning != "" {
		p.split = newReasoningFilter(o.Reasoning, o.Dim, o.InReasoning, func(s string) { io.WriteString(p.out, s) })
	}
	return p
}

// write passes text through the reasoning split, if there is one.
func (p *Printer) write(s string) {
	if p.split != nil {
		p.split.Add(s)
	} else {
		io.WriteString(p.out, s)
	}
}

// Token shows one new token drawn from logits; it always goes on.
func (p *Printer) Token(id int, logits []float32) bool {
	if p.o.TopProbs == 0 {
		if p.split == nil || !slices.Contains(p.o.EOS, id) {
			p.write(p.text.Add(id))
		}
		return true
	}
	piece, _ := p.codec.Decode([]int{id})
	fmt.Fprintf(p.out, "  %-16q", piece)
	for _, tp := range TopProbs(logits, p.o.TopProbs) {
		s, _ := p.codec.Decode([]int{tp.ID})
		fmt.Fprintf(p.out, "  %q %.3f", s, tp.Prob)
	}
	fmt.Fprintln(p.out)
	return true
}

// Close writes what the text held back and the final newline, and returns
// the first error writing Out.
func (p *Printer) Close() error {
	if p.o.TopProbs == 0 {
		p.write(p.text.Flush())
		if p.split != nil {
			p.split.Flush()
		}
		fmt.Fprintln(p.out)
	}
	return p.out.err
}

// Print generates a continuation of prompt (Generate with o) and streams
// it to out through a Printer with p, a newline after it.
func Print(m *model.Model, codec TextCodec, be *model.Backend, prompt []int, o GenerateOptions, p PrintOptions, out io.Writer) (*GenerateResult, error) {
	pr := NewPrinter(codec, out, p)
	o.OnToken = pr.Token
	res, err := Generate(m, prompt, be, o)
	if err != nil {
		return nil, err
	}
	return res, pr.Close()
}
