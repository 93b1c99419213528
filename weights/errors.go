package weights

import (
	"fmt"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// quote shows a name taken from a file with control characters escaped.
func quote(s string) string { return safeio.Quote(s) }

// clean shows a path with control characters escaped.
func clean(s string) string { return safeio.Clean(s) }

// maxListedProblems caps how many problems one FormatError spells out, so a
// file of garbage yields a readable message rather than thousands of lines.
const maxListedProblems = 12

// FormatError reports everything found wrong with one checkpoint file (a
// .safetensors file or a model.safetensors.index.json). Each problem already
// names the tensor or shard it concerns.
type FormatError struct {
	File     string   // path of the offending file
	Problems []string // one line per problem, in the order found
}

// Error lists the file and its problems on one line.
func (e *FormatError) Error() string {
	if len(e.Problems) == 1 {
		return fmt.Sprintf("weights: %s: %s", clean(e.File), e.Problems[0])
	}
	return fmt.Sprintf("weights: %s: %d problems: %s", clean(e.File), len(e.Problems),
		safeio.List(e.Problems, maxListedProblems))
}

// problems collects format problems for one file.
type problems struct {
	file string
	list []string
}

func (p *problems) addf(format string, args ...any) {
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

// tensorf records a problem with one tensor, quoting its stored name.
func (p *problems) tensorf(name, format string, args ...any) {
	p.list = append(p.list, "tensor "+quote(name)+": "+fmt.Sprintf(format, args...))
}

func (p *problems) any() bool { return len(p.list) > 0 }

// err returns nil when nothing was found, else a *FormatError.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &FormatError{File: p.file, Problems: p.list}
}

// joinErrors joins the errors of several files (nil ones dropped) into one
// error on one line, listing at most maxListedProblems of them: errors.Join
// puts each on its own line, and an index of 4,096 broken shards would
// print thousands. errors.Is and errors.As still see every one.
func joinErrors(errs []error) error {
	var keep []error
	for _, err := range errs {
		if err != nil {
			keep = append(keep, err)
		}
	}
	switch len(keep) {
	case 0:
		return nil
	case 1:
		return keep[0]
	}
	return &joinedError{errs: keep}
}

// joinedError is joinErrors' result.
type joinedError struct{ errs []error }

// Error lists the first errors on one line, then how many more there are.
func (e *joinedError) Error() string {
	msgs := make([]string, 0, min(len(e.errs), maxListedProblems))
	for _, err := range e.errs[:cap(msgs)] {
		msgs = append(msgs, err.Error())
	}
	s := strings.Join(msgs, "; ")
	if n := len(e.errs) - len(msgs); n > 0 {
		s += fmt.Sprintf("; and %d more", n) // as safeio.List counts the rest
	}
	return s
}

// Unwrap returns every joined error, for errors.Is and errors.As.
func (e *joinedError) Unwrap() []error { return e.errs }
