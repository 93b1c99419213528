// Package docsnippets finds the fenced code blocks in the repository's
// Markdown files, checks that every shell and Python block says whether it
// is run, and runs the ones that are (cmd/snippets).
//
// A block's tag follows its language in the fence's info string; GitHub
// renders only the first word, the language:
//
//	```sh run-cpu                  run by scripts/test on any machine
//	```python run-gpu              run by scripts/gpu-check snippets on a CUDA machine
//	```sh not-run: REASON          never run; REASON says why (network, size, time)
//
// Shell languages are sh, bash, shell and console (whose commands are the
// lines after a "$ " prompt); Python is python or py. Other languages
// (go, c, json, text, ...) take no tag, and every fenced block must name a
// language, so that no command hides in an unlabelled block.
package docsnippets

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Tag says whether and where a block runs.
type Tag int

// The tags a shell or Python block may carry.
const (
	Untagged Tag = iota
	RunCPU
	RunGPU
	NotRun
)

// String returns the tag as written in a fence.
func (t Tag) String() string {
	switch t {
	case RunCPU:
		return "run-cpu"
	case RunGPU:
		return "run-gpu"
	case NotRun:
		return "not-run"
	}
	return "untagged"
}

// ParseTag reads a tag name as a command-line flag gives it (run-cpu or run-gpu).
func ParseTag(s string) (Tag, error) {
	switch s {
	case "run-cpu":
		return RunCPU, nil
	case "run-gpu":
		return RunGPU, nil
	}
	return Untagged, fmt.Errorf("unknown tag %q: want run-cpu or run-gpu", s)
}

// Block is one fenced code block of a Markdown file.
type Block struct {
	File   string // path relative to the repository root, slash-separated
	Line   int    // 1-based line of the opening fence
	Info   string // the info string after the fence characters
	Lang   string // its first word, lower-cased
	Tag    Tag
	Reason string // why a not-run block is not run
	Body   string // the lines between the fences, fence indentation removed
	err    string // what is wrong with the fence line, if anything
}

// Where names the block as file:line.
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// Runnable reports whether the block's language is one the runner executes
// (a shell or Python block), which must then carry a tag.
func (b Block) Runnable() bool { return b.Shell() || b.Python() }

// Shell reports whether the block holds shell commands.
func (b Block) Shell() bool {
	switch b.Lang {
	case "sh", "bash", "shell", "console":
		return true
	}
	return false
}

// Python reports whether the block holds Python code.
func (b Block) Python() bool { return b.Lang == "python" || b.Lang == "py" }

// Check returns an error naming file:line when the block lacks a language,
// a runnable block lacks a tag, or a tag is malformed.
func (b Block) Check() error {
	if b.err != "" {
		return fmt.Errorf("%s: %s", b.Where(), b.err)
	}
	return nil
}

// ParseFile returns the fenced code blocks of one Markdown file, in order.
// name is recorded in each block; an unclosed fence is an error.
func ParseFile(name string, src []byte) ([]Block, error) {
	var blocks []Block
	var open *Block
	var fenceChar byte
	var fenceLen, indent int
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSuffix(sc.Text(), "\r")
		lead := len(text) - len(strings.TrimLeft(text, " \t"))
		rest := text[lead:]
		if open != nil {
			if n := fenceRun(rest); n >= fenceLen && rest[0] == fenceChar && strings.TrimSpace(rest[n:]) == "" {
				open.Body = body.String()
				blocks = append(blocks, *open)
				open = nil
				continue
			}
			body.WriteString(stripIndent(text, indent))
			body.WriteByte('\n')
			continue
		}
		n := fenceRun(rest)
		if n < 3 {
			continue
		}
		info := strings.TrimSpace(rest[n:])
		if rest[0] == '`' && strings.Contains(info, "`") {
			continue // inline code such as ```x``` in prose, not a fence
		}
		b := parseInfo(Block{File: name, Line: line, Info: info})
		open, fenceChar, fenceLen, indent = &b, rest[0], n, lead
		body.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if open != nil {
		return nil, fmt.Errorf("%s: code fence opened here is never closed", open.Where())
	}
	return blocks, nil
}

// fenceRun returns the length of the run of backticks or tildes that starts
// s, or 0 when s does not start with one.
func fenceRun(s string) int {
	if s == "" || (s[0] != '`' && s[0] != '~') {
		return 0
	}
	n := 0
	for n < len(s) && s[n] == s[0] {
		n++
	}
	return n
}

// stripIndent removes up to n leading spaces, as CommonMark does for the
// lines of a fenced block whose fence is indented by n.
func stripIndent(s string, n int) string {
	for i := 0; i < n && len(s) > 0 && (s[0] == ' ' || s[0] == '\t'); i++ {
		s = s[1:]
	}
	return s
}

// parseInfo fills the block's language and tag from its info string, or
// records what is wrong with them.
func parseInfo(b Block) Block {
	lang, rest, _ := strings.Cut(b.Info, " ")
	b.Lang = strings.ToLower(lang)
	rest = strings.TrimSpace(rest)
	switch {
	case b.Lang == "":
		b.err = "code block without a language: name one (sh, python, go, text, ...)"
	case !b.Runnable():
		if rest != "" && tagWord(rest) {
			b.err = fmt.Sprintf("%q: only shell and Python blocks take a tag", b.Info)
		}
	case rest == "":
		b.err = fmt.Sprintf("untagged %s block: write ```%s run-cpu, run-gpu or not-run: REASON", b.Lang, lang)
	case rest == "run-cpu":
		b.Tag = RunCPU
	case rest == "run-gpu":
		b.Tag = RunGPU
	case strings.HasPrefix(rest, "not-run:"):
		b.Tag = NotRun
		b.Reason = strings.TrimSpace(strings.TrimPrefix(rest, "not-run:"))
		if b.Reason == "" {
			b.err = "not-run needs a reason after the colon"
		}
	default:
		b.err = fmt.Sprintf("unknown tag %q after ```%s: want run-cpu, run-gpu or not-run: REASON", rest, lang)
	}
	return b
}

// tagWord reports whether s starts like a tag, so that a tag on a block
// that takes none is caught rather than ignored.
func tagWord(s string) bool {
	return strings.HasPrefix(s, "run-") || strings.HasPrefix(s, "not-run")
}
