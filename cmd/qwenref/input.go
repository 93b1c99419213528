package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/tokenizer"
)

// maxInputBytes caps what a prompt, ids or messages file (or stdin) may
// hold, so a wrong path (a disk image, /dev/zero) fails instead of filling
// memory.
const maxInputBytes = 256 << 20

// readArg reads a file named on the command line; "-" is stdin.
func readArg(flagName, path string) ([]byte, error) {
	return readArgCapped(flagName, path, maxInputBytes)
}

// readText reads a text input (a prompt, a text to score), capped at what
// the tokenizer encodes, so a larger file is refused before it is read.
func readText(flagName, path string) ([]byte, error) {
	return readArgCapped(flagName, path, tokenizer.MaxEncodeBytes)
}

// readArgCapped is readArg with its own cap in bytes.
func readArgCapped(flagName, path string, maxBytes int) ([]byte, error) {
	var r io.Reader
	name := path
	if path == "-" {
		r, name = stdin, "stdin"
	} else {
		// Opened without blocking, then checked: a FIFO never hangs.
		f, _, err := safeio.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (pipe other input to stdin with %s -)", flagName, err, flagName)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", flagName, name, err)
	}
	if len(data) > maxBytes {
		return nil, fmt.Errorf("%s: %s holds more than %d MiB", flagName, name, maxBytes>>20)
	}
	return data, nil
}

// errNoIDs means neither --ids nor --ids-json was given.
var errNoIDs = errors.New("missing --ids or --ids-json")

// readIDs reads token ids from --ids (comma-separated, or a JSON array;
// "-" reads either from stdin) or --ids-json (a JSON file of equal-length
// rows, or "-" for stdin). Exactly one may be given.
func readIDs(name, list, jsonPath string) ([][]int, error) {
	switch {
	case list != "" && jsonPath != "":
		return nil, fmt.Errorf("give %s or --ids-json, not both", name)
	case list == "" && jsonPath == "":
		return nil, errNoIDs
	case jsonPath != "":
		data, err := readArg("--ids-json", jsonPath)
		if err != nil {
			return nil, err
		}
		rows, err := generate.ParseIDs(data)
		if err != nil {
			return nil, fmt.Errorf("--ids-json %s: %w", jsonPath, err)
		}
		return rows, nil
	}
	text := list
	if list == "-" {
		data, err := readArg(name, "-")
		if err != nil {
			return nil, err
		}
		// From a pipe or file, ids may be separated by commas or any
		// whitespace (one per line, say); on the command line, by commas.
		text = strings.Join(strings.Fields(strings.ReplaceAll(string(data), ",", " ")), ",")
	}
	if t := bytes.TrimSpace([]byte(text)); len(t) > 0 && t[0] == '[' {
		rows, err := generate.ParseIDs(t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return rows, nil
	}
	ids, err := generate.ParseIDList(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return [][]int{ids}, nil
}

// readPrompt returns --prompt, or --prompt-file's contents ("-" or
// --prompt - read stdin); ok is false when neither was given.
func readPrompt(prompt, file string) (text string, ok bool, err error) {
	if prompt != "" && file != "" {
		return "", false, errors.New("give --prompt or --prompt-file, not both")
	}
	if prompt == "-" {
		file = "-"
	}
	if file == "" {
		return prompt, prompt != "", nil
	}
	data, err := readText("--prompt-file", file)
	if err != nil {
		return "", false, err
	}
	return string(data), true, nil
}
