package features

import (
	"io"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/tokenizer"
)

// The application helpers (package generate) that features calls, in one
// place, so that their moves touch one file.

// LoadTokenizer is the checkpoint's tokenizer as every command loads it.
func LoadTokenizer(dir, path string, vocab int, embedded func() (*tokenizer.Tokenizer, error), stderr io.Writer) (*tokenizer.Tokenizer, error) {
	return generate.LoadTokenizer(dir, path, vocab, embedded, stderr)
}

// LoadTemplate is the checkpoint's chat template, or file's when set, as
// `qwenref prompt` loads it.
func LoadTemplate(dir, file string) (*chat.Template, error) {
	return chat.LoadOverride(dir, file)
}
