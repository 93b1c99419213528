package generate

import (
	"fmt"
	"io"
)

// PrintOptions say how a Printer shows a continuation.
type PrintOptions struct {
	// TopProbs > 0 prints a line per token instead of the text: the token
	// and its TopProbs most likely tokens with their probabilities.
	TopProbs int
}

// Printer writes a continuation to Out as its tokens come (Token is a
// GenerateOptions.OnToken), and a newline after it (Close).
type Printer struct {
	codec TextCodec
	out   *firstError
	o     PrintOptions
	text  *TextStream
}

// NewPrinter writes the tokens codec decodes to out, as o says.
func NewPrinter(codec TextCodec, out io.Writer, o PrintOptions) *Printer {
	return &Printer{codec: codec, out: &firstError{w: out}, o: o, text: &TextStream{Codec: codec}}
}

// Token shows one new token drawn from logits; it always goes on.
func (p *Printer) Token(id int, logits []float32) bool {
	if p.o.TopProbs == 0 {
		io.WriteString(p.out, p.text.Add(id))
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
		fmt.Fprintln(p.out, p.text.Flush())
	}
	return p.out.err
}
