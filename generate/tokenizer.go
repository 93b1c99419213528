package generate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/qwenref/qwenref/tokenizer"
)

// LoadTokenizer loads tokPath, else DIR/tokenizer.json, else the embedded
// Qwen3 tokenizer (embedded) when it fits a vocabulary of vocab ids; it
// warns on stderr when the tokenizer's ids can fall outside the vocabulary.
func LoadTokenizer(dir, tokPath string, vocab int, embedded func() (*tokenizer.Tokenizer, error), stderr io.Writer) (*tokenizer.Tokenizer, error) {
	path := tokPath
	if path == "" {
		path = filepath.Join(dir, "tokenizer.json")
	}
	tok, err := tokenizer.Load(path)
	if errors.Is(err, os.ErrNotExist) && tokPath == "" {
		emb, eerr := embedded()
		if eerr != nil {
			return nil, eerr
		}
		if emb.VocabSize() > vocab {
			return nil, fmt.Errorf("no tokenizer at %s, and the embedded Qwen3 tokenizer (%d tokens) does not fit the model's vocabulary (%d): pass --tokenizer FILE (or use `qwenref generate --ids` to skip text)",
				path, emb.VocabSize(), vocab)
		}
		fmt.Fprintf(stderr, "warning: no tokenizer at %s: using the embedded Qwen3 tokenizer (%d tokens); Qwen3.5/3.6 checkpoints ship their own tokenizer.json, which is the right one for them\n",
			path, emb.VocabSize())
		return emb, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no tokenizer at %s: pass --tokenizer FILE (or use `qwenref generate --ids` to skip text)", path)
	}
	if err != nil {
		return nil, err
	}
	if tok.VocabSize() > vocab {
		fmt.Fprintf(stderr, "warning: the tokenizer %s has %d tokens but the model's vocabulary is %d: text may encode to ids the model does not have\n", path, tok.VocabSize(), vocab)
	}
	return tok, nil
}
