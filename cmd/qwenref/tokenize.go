package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/tokenizer"
)

func init() {
	register(&command{name: "tokenize", summary: "encode text to token ids (or decode ids) with an HF tokenizer.json", run: runTokenize})
}

func runTokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "[--tokenizer FILE] (--text STR | --decode 1,2,3) [--json]", `
Encodes text with a byte-level BPE tokenizer.json exactly as HF tokenizers
does (added and special tokens first, NFC, Qwen's split regex, byte-level
mapping, merges by rank; no special tokens are added), or decodes ids.
Without --tokenizer it uses the embedded Qwen3 tokenizer.

Examples:
  qwenref tokenize --text "Hello, world" --json          # [9707,11,1879]
  qwenref tokenize --tokenizer DIR/tokenizer.json --text "<|im_start|>user"
  qwenref tokenize --decode 9707,11,1879`, stderr)
	path := fs.String("tokenizer", "", "tokenizer.json (plain or .gz); default: the embedded Qwen3 tokenizer")
	text := fs.String("text", "", "text to encode")
	decode := fs.String("decode", "", "comma-separated ids to decode instead")
	asJSON := fs.Bool("json", false, "print only a JSON array of ids (or a JSON string when decoding)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*text == "") == (*decode == "") {
		fmt.Fprintln(stderr, "give exactly one of --text and --decode")
		fs.Usage()
		return errUsage
	}
	var tok *tokenizer.Tokenizer
	var err error
	if *path == "" {
		tok, err = bundled.Tokenizer()
	} else {
		tok, err = tokenizer.Load(*path)
	}
	if err != nil {
		return err
	}
	if *decode != "" {
		ids, err := parseIDList(*decode)
		if err != nil {
			return fmt.Errorf("--decode: %w", err)
		}
		s, err := tok.Decode(ids)
		if err != nil {
			return err
		}
		if *asJSON {
			out, _ := json.Marshal(s)
			fmt.Fprintln(stdout, string(out))
		} else {
			fmt.Fprintln(stdout, s)
		}
		return nil
	}
	ids, err := tok.Encode(*text)
	if err != nil {
		return err
	}
	if *asJSON {
		out, _ := json.Marshal(ids)
		if ids == nil {
			out = []byte("[]")
		}
		fmt.Fprintln(stdout, string(out))
		return nil
	}
	fmt.Fprintf(stdout, "%d tokens\n", len(ids))
	for _, id := range ids {
		t, _ := tok.IDToToken(id)
		fmt.Fprintf(stdout, "%8d  %s\n", id, strconv.Quote(t))
	}
	return nil
}
