package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// normalizer applies Unicode normalization forms in order (a Sequence of
// NFC/NFD/NFKC/NFKD, or one of them).
type normalizer struct {
	forms []norm.Form
}

func (n *normalizer) apply(s string) string {
	for _, f := range n.forms {
		s = normalizeForm(f, s)
	}
	return s
}

// parseNormalizer reads the normalizer section; null means none.
func parseNormalizer(raw json.RawMessage, field string) (*normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	n := &normalizer{}
	if err := n.add(raw, field, 0); err != nil {
		return nil, err
	}
	return n, nil
}

var normForms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

func (n *normalizer) add(raw json.RawMessage, field string, depth int) error {
	typ, err := typeOf(raw, field)
	if err != nil {
		return err
	}
	if form, ok := normForms[typ]; ok {
		if len(n.forms) == MaxNormalizerSteps {
			return fmt.Errorf("%s: more than %d normalizers in all (see docs/limits.md)", field, MaxNormalizerSteps)
		}
		n.forms = append(n.forms, form)
		return nil
	}
	switch typ {
	case "Sequence":
		var seq struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if seq.Normalizers == nil {
			return fmt.Errorf("%s: Sequence without \"normalizers\"", field)
		}
		if len(seq.Normalizers) > MaxNormalizerSteps {
			return fmt.Errorf("%s: %d normalizers, over the limit of %d (see docs/limits.md)", field, len(seq.Normalizers), MaxNormalizerSteps)
		}
		if depth == MaxSequenceDepth {
			return fmt.Errorf("%s: Sequences nested more than %d deep (see docs/limits.md)", field, MaxSequenceDepth)
		}
		for i, sub := range seq.Normalizers {
			if err := n.add(sub, fmt.Sprintf("%s.normalizers[%d]", field, i), depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s.type %q: unsupported normalizer (supported: NFC, NFD, NFKC, NFKD, Sequence)", field, typ)
	}
	return nil
}

// splitBehavior is what HF's Split does with the delimiters it finds.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviorNames = map[string]splitBehavior{
	"Removed":            behaviorRemoved,
	"Isolated":           behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

// preStep is one pre-tokenizer: either a Split or a ByteLevel.
type preStep struct {
	// Split
	re       *regex
	behavior splitBehavior
	invert   bool
	// ByteLevel
	byteLevel      bool
	addPrefixSpace bool
	useRegex       bool
}

// gpt2Pattern is the split ByteLevel applies when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

var (
	gpt2Once sync.Once
	gpt2Re   *regex
)

func gpt2Regex() *regex {
	gpt2Once.Do(func() {
		re, err := compileRegex(gpt2Pattern)
		if err != nil {
			panic("tokenizer: built-in GPT-2 pattern does not compile: " + err.Error())
		}
		gpt2Re = re
	})
	return gpt2Re
}

// Limits on the normalizer and pre_tokenizer sections (real tokenizers
// have at most 3 steps and patterns under 1 KiB): each step is a pass over
// the text, and compiling patterns takes time and memory. A second
// ByteLevel step is refused because each doubles the bytes of non-ASCII
// text.
const (
	MaxNormalizerSteps   = 16
	MaxPreTokenizerSteps = 16
	MaxPatternBytes      = 8 << 10 // all Split patterns together
	// MaxSequenceDepth bounds nesting: each level re-reads the JSON below it.
	MaxSequenceDepth = 4
)

// parsePreTokenizer flattens the pre_tokenizer section into steps.
func parsePreTokenizer(raw json.RawMessage, field string) ([]preStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p preParse
	if err := p.add(raw, field, 0); err != nil {
		return nil, err
	}
	return p.steps, nil
}

// preParse is the state of flattening a pre_tokenizer section.
type preParse struct {
	steps        []preStep
	patternBytes int
	byteLevel    bool
}

// room refuses a step past MaxPreTokenizerSteps.
func (p *preParse) room(field string) error {
	if len(p.steps) == MaxPreTokenizerSteps {
		return fmt.Errorf("%s: more than %d pre-tokenizer steps in all (see docs/limits.md)", field, MaxPreTokenizerSteps)
	}
	return nil
}

func (p *preParse) add(raw json.RawMessage, field string, depth int) error {
	typ, err := typeOf(raw, field)
	if err != nil {
		return err
	}
	steps := &p.steps
	switch typ {
	case "Sequence":
		var seq struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if seq.PreTokenizers == nil {
			return fmt.Errorf("%s: Sequence without \"pretokenizers\"", field)
		}
		if len(seq.PreTokenizers) > MaxPreTokenizerSteps {
			return fmt.Errorf("%s: %d pre-tokenizers, over the limit of %d (see docs/limits.md)", field, len(seq.PreTokenizers), MaxPreTokenizerSteps)
		}
		if depth == MaxSequenceDepth {
			return fmt.Errorf("%s: Sequences nested more than %d deep (see docs/limits.md)", field, MaxSequenceDepth)
		}
		for i, sub := range seq.PreTokenizers {
			if err := p.add(sub, fmt.Sprintf("%s.pretokenizers[%d]", field, i), depth+1); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		var sp struct {
			Pattern *struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			} `json:"pattern"`
			Behavior *string `json:"behavior"`
			Invert   bool    `json:"invert"`
		}
		if err := requireBools(raw, field, "invert"); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &sp); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if sp.Pattern == nil || (sp.Pattern.String == nil) == (sp.Pattern.Regex == nil) {
			return fmt.Errorf("%s.pattern: want exactly one of {\"String\": ...} or {\"Regex\": ...}", field)
		}
		if sp.Behavior == nil {
			return fmt.Errorf("%s.behavior: missing", field)
		}
		b, ok := behaviorNames[*sp.Behavior]
		if !ok {
			return fmt.Errorf("%s.behavior %q: want Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous", field, *sp.Behavior)
		}
		pat := ""
		if sp.Pattern.Regex != nil {
			pat = *sp.Pattern.Regex
		} else {
			pat = escapeLiteral(*sp.Pattern.String)
		}
		if err := p.room(field); err != nil {
			return err
		}
		if p.patternBytes += len(pat); p.patternBytes > MaxPatternBytes {
			return fmt.Errorf("%s.pattern: the patterns hold %d bytes in all, over the limit of %d (see docs/limits.md)", field, p.patternBytes, MaxPatternBytes)
		}
		re, err := compileRegex(pat)
		if err != nil {
			return fmt.Errorf("%s.pattern: %w", field, err)
		}
		*steps = append(*steps, preStep{re: re, behavior: b, invert: sp.Invert})
		return nil
	case "ByteLevel":
		// As in HF, use_regex alone may be left out (default true).
		if err := requireBools(raw, field, "add_prefix_space", "trim_offsets"); err != nil {
			return err
		}
		bl := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &bl); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		if err := p.room(field); err != nil {
			return err
		}
		if p.byteLevel {
			return fmt.Errorf("%s: a second ByteLevel pre-tokenizer (each one doubles the bytes of non-ASCII text)", field)
		}
		p.byteLevel = true
		*steps = append(*steps, preStep{
			byteLevel:      true,
			addPrefixSpace: bl.AddPrefixSpace,
			useRegex:       bl.UseRegex == nil || *bl.UseRegex,
		})
		return nil
	}
	return fmt.Errorf("%s.type %q: unsupported pre-tokenizer (supported: Split, ByteLevel, Sequence)", field, typ)
}

// escapeLiteral quotes the characters Rust's regex::escape quotes, which
// is how HF turns a String pattern into a regex.
func escapeLiteral(s string) string {
	var sb strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$#&-~`, c) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

// split passes to fn, in order, the non-empty pieces of s that HF's Split
// keeps, as spans arrive from the pattern: at most one piece is held back,
// to be merged with the next span.
func (r *regex) split(e *encoder, step int, s string, b splitBehavior, invert bool, fn func(string) error) error {
	var pend span // the piece held back
	havePend := false
	lastMatch := false // whether the previous span was a match
	flush := func() error {
		if !havePend {
			return nil
		}
		havePend = false
		if pend.end > pend.start {
			return fn(s[pend.start:pend.end])
		}
		return nil
	}
	err := r.scan(e, s, e.runeBuf(step), func(sp span) error {
		if invert {
			sp.match = !sp.match
		}
		defer func() { lastMatch = sp.match }()
		switch b {
		case behaviorIsolated:
			if sp.end > sp.start {
				return fn(s[sp.start:sp.end])
			}
		case behaviorRemoved:
			if !sp.match && sp.end > sp.start {
				return fn(s[sp.start:sp.end])
			}
		case behaviorContiguous:
			// Runs of matches, and runs of non-matches, are one piece each.
			if havePend && sp.match == lastMatch {
				pend.end = sp.end
				return nil
			}
		case behaviorMergedWithPrevious:
			// A match joins the piece before it unless that ends in a match.
			if havePend && sp.match && !lastMatch {
				pend.end = sp.end
				return nil
			}
		case behaviorMergedWithNext:
			// A match joins the piece after it unless that is a match. HF
			// folds from the right; the held-back match waits for its
			// successor.
			if havePend && pend.match && !sp.match {
				pend.end = sp.end
				pend.match = false
				return flush()
			}
		}
		if b == behaviorIsolated || b == behaviorRemoved {
			return nil
		}
		if err := flush(); err != nil {
			return err
		}
		pend, havePend = sp, true
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
