package features

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/tokenizer"
)

// MaxLineBytes bounds one JSONL line: a longer line is an error naming it,
// read no further than this.
const MaxLineBytes = 256 << 20

// Sample is one prepared line of the data set.
type Sample struct {
	Index int       // sample number in the file, from 0 (blank lines are not samples)
	Line  int       // line number, from 1
	IDs   []int     // token ids, at most MaxLen
	Mask  []float32 // loss mask over IDs: 1 on tokens a drafter is trained to predict
	Cut   int       // tokens cut by MaxLen
}

// record is one JSONL line as the user writes it.
type record struct {
	IDs      []int             `json:"ids"`
	LossMask []int             `json:"loss_mask"`
	Text     *string           `json:"text"`
	Messages []json.RawMessage `json:"messages"`
	Tools    json.RawMessage   `json:"tools"`
}

// Preparer turns lines into samples: it tokenizes text, renders messages
// with the chat template and builds their loss mask.
type Preparer struct {
	Tokenizer *tokenizer.Tokenizer // for text and messages
	Template  *chat.Template       // for messages
	Vars      map[string]any       // the template's keyword arguments
	MaxLen    int                  // 0: no limit
	Vocab     int                  // ids must be below it
}

// The turn markers of SpecForge's "qwen" chat template
// (sgl-project/SpecForge, specforge/data/template.py), between which its
// GeneralParser (specforge/data/parse.py) marks the assistant's tokens.
const (
	assistantHeader = "<|im_start|>assistant\n"
	endOfTurn       = "<|im_end|>\n"
)

// Prepare parses one line into a sample.
func (p *Preparer) Prepare(line []byte, index, lineNo int) (Sample, error) {
	s := Sample{Index: index, Line: lineNo}
	var r record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return s, fmt.Errorf("not a JSON object with ids, text or messages (and tools, loss_mask): %v", err)
	}
	if dec.More() {
		return s, errors.New("more than one JSON value on the line")
	}
	n := 0
	for _, set := range []bool{r.IDs != nil, r.Text != nil, r.Messages != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return s, errors.New("want exactly one of ids, text and messages")
	}
	if r.Tools != nil && r.Messages == nil {
		return s, errors.New("tools go with messages")
	}
	if r.LossMask != nil && r.IDs == nil {
		return s, errors.New("loss_mask goes with ids (text is all trained on, messages get the assistant mask)")
	}
	var err error
	switch {
	case r.IDs != nil:
		s.IDs = r.IDs
		s.Mask = ones(len(r.IDs))
		if r.LossMask != nil {
			if len(r.LossMask) != len(r.IDs) {
				return s, fmt.Errorf("loss_mask has %d values for %d ids", len(r.LossMask), len(r.IDs))
			}
			for i, v := range r.LossMask {
				if v != 0 && v != 1 {
					return s, fmt.Errorf("loss_mask[%d] is %d, want 0 or 1", i, v)
				}
				s.Mask[i] = float32(v)
			}
		}
	case r.Text != nil:
		if s.IDs, err = p.encode(*r.Text); err != nil {
			return s, err
		}
		s.Mask = ones(len(s.IDs))
	default:
		if s.IDs, s.Mask, err = p.conversation(r.Messages, r.Tools); err != nil {
			return s, err
		}
	}
	if len(s.IDs) == 0 {
		return s, errors.New("no tokens")
	}
	for i, id := range s.IDs {
		if id < 0 || p.Vocab > 0 && id >= p.Vocab {
			return s, fmt.Errorf("token %d is id %d, outside the model's vocabulary of %d", i, id, p.Vocab)
		}
	}
	if p.MaxLen > 0 && len(s.IDs) > p.MaxLen {
		s.Cut = len(s.IDs) - p.MaxLen
		s.IDs, s.Mask = s.IDs[:p.MaxLen], s.Mask[:p.MaxLen]
	}
	return s, nil
}

func (p *Preparer) encode(text string) ([]int, error) {
	if p.Tokenizer == nil {
		return nil, errors.New("text needs a tokenizer")
	}
	return p.Tokenizer.Encode(text)
}

// conversation renders messages as apply_chat_template(messages,
// tools=tools, tokenize=False, add_generation_prompt=False) and marks the
// assistant's tokens.
func (p *Preparer) conversation(msgs []json.RawMessage, tools json.RawMessage) ([]int, []float32, error) {
	if p.Template == nil {
		return nil, nil, errors.New("messages need a chat template")
	}
	all, err := json.Marshal(msgs)
	if err != nil {
		return nil, nil, err
	}
	if string(tools) == "null" {
		tools = nil
	}
	text, err := p.Template.Render(chat.Input{Messages: all, Tools: tools, Vars: p.Vars})
	if err != nil {
		return nil, nil, fmt.Errorf("chat template: %w", err)
	}
	ids, err := p.encode(text)
	if err != nil {
		return nil, nil, err
	}
	mask, err := AssistantMask(text, len(ids), p.encode)
	return ids, mask, err
}

// AssistantMask is SpecForge's loss mask for a rendered conversation of n
// tokens: every span from just after "<|im_start|>assistant\n" through the
// next "<|im_end|>\n" (or the end of the text) is 1, its token bounds being
// the lengths of the encodings of the text before its start and end.
func AssistantMask(text string, n int, encode func(string) ([]int, error)) ([]float32, error) {
	mask := make([]float32, n)
	for pos := 0; ; {
		i := strings.Index(text[pos:], assistantHeader)
		if i < 0 {
			return mask, nil
		}
		start := pos + i + len(assistantHeader)
		end := len(text)
		if j := strings.Index(text[start:], endOfTurn); j >= 0 {
			end = start + j + len(endOfTurn)
		}
		a, err := encode(text[:start])
		if err != nil {
			return nil, err
		}
		b, err := encode(text[:end])
		if err != nil {
			return nil, err
		}
		for k := min(len(a), n); k < min(len(b), n); k++ {
			mask[k] = 1
		}
		pos = end
	}
}

func ones(n int) []float32 {
	m := make([]float32, n)
	for i := range m {
		m[i] = 1
	}
	return m
}

// Lines reads r line by line, calling fn with each non-blank line, its
// sample number and its line number; a line over MaxLineBytes is an error.
func Lines(r io.Reader, fn func(line []byte, index, lineNo int) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	index := 0
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("line %d: %w", lineNo, err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if ferr := fn(line, index, lineNo); ferr != nil {
				return ferr
			}
			index++
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// readLine returns the next line without its newline, refusing one over
// MaxLineBytes before reading it all.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > MaxLineBytes {
			return nil, fmt.Errorf("longer than %d MiB", MaxLineBytes>>20)
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil {
			line = line[:len(line)-1]
		}
		return line, err
	}
}
