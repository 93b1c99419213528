package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/tokenizer"
)

func init() {
	register(&command{name: "tokenize", summary: "encode text to token ids (or decode ids) with an HF tokenizer.json", run: runTokenize})
}

func runTokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "[--tokenizer FILE] (--text STR | --text-file F | --decode 1,2,3) [--json]", `
Encodes text with a byte-level BPE tokenizer.json exactly as HF tokenizers
does (added and special tokens first, NFC, Qwen's split regex, byte-level
mapping, merges by rank; no special tokens are added), or decodes ids.
Without --tokenizer it uses the embedded Qwen3 tokenizer (151,669 entries;
Qwen3.5/3.6 checkpoints ship their own tokenizer.json: pass it). "-" as
--text, --text-file or --decode reads stdin.

Examples:
  qwenref tokenize --text "Hello, world" --json          # [9707,11,1879]
  qwenref tokenize --tokenizer DIR/tokenizer.json --text "<|im_start|>user"
  qwenref tokenize --decode 9707,11,1879`, stderr)
	path := fs.String("tokenizer", "", "tokenizer.json (plain or .gz); default: the embedded Qwen3 tokenizer")
	dir := addModelFlag(fs, ": use its tokenizer.json")
	text := fs.String("text", "", "text to encode (- reads stdin)")
	textFile := fs.String("text-file", "", "file with the text to encode (- for stdin)")
	decode := fs.String("decode", "", "ids to decode instead: comma-separated or a JSON array (- reads stdin)")
	asJSON := fs.Bool("json", false, "print only a JSON array of ids (or a JSON string when decoding)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	given := 0
	for _, v := range []string{*text, *textFile, *decode} {
		if v != "" {
			given++
		}
	}
	if given != 1 { // checked before any input is read
		return usageError(fs, stderr, "give exactly one of --text, --text-file and --decode")
	}
	if *dir != "" {
		if *path != "" {
			return usageError(fs, stderr, "give --model or --tokenizer, not both")
		}
		if err := resolveModelFlag(dir, stderr); err != nil {
			return err
		}
		*path = filepath.Join(*dir, "tokenizer.json")
	}
	input := *text
	if *text == "-" || *textFile != "" {
		name, file := "--text-file", *textFile
		if *text == "-" {
			name, file = "--text", "-"
		}
		data, err := readText(name, file) // errors name the flag given
		if err != nil {
			return err
		}
		input = string(data)
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
		rows, err := readIDs("--decode", *decode, "")
		if err != nil {
			return usageError(fs, stderr, "%v", err)
		}
		if len(rows) != 1 {
			return usageError(fs, stderr, "--decode takes one row of ids, got %d", len(rows))
		}
		ids := rows[0]
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
	ids, err := tok.Encode(input)
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
	fmt.Fprintln(stdout, count(len(ids), "token"))
	for _, id := range ids {
		t, _ := tok.IDToToken(id)
		fmt.Fprintf(stdout, "%8d  %s\n", id, strconv.Quote(t))
	}
	return nil
}
