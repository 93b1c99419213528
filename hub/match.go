package hub

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultInclude is what qwenref reads from a checkpoint: the text config
// and generation defaults, the tokenizer with its chat template, and the
// safetensors weights with their index. Vision-only files (image and
// video preprocessor configs) and other weight formats are left out. These
// patterns apply to top-level files only.
var DefaultInclude = []string{
	"config.json",
	"generation_config.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"chat_template.jinja",
	"chat_template.json",
	"special_tokens_map.json",
	"added_tokens.json",
	"vocab.json",
	"merges.txt",
	"*.safetensors",
	"*.safetensors.index.json",
}

// Matcher selects repository files by shell patterns with Python fnmatch
// semantics, as huggingface_hub's allow_patterns: '*' matches any run of
// characters including '/', '?' one character, [abc] and [!abc] a set;
// a pattern ending in '/' matches everything under that folder.
type Matcher struct {
	res      []*regexp.Regexp
	topLevel bool
}

// NewMatcher compiles patterns; with none it uses DefaultInclude, applied
// to top-level files only.
func NewMatcher(patterns []string) (*Matcher, error) {
	m := &Matcher{}
	if len(patterns) == 0 {
		patterns, m.topLevel = DefaultInclude, true
	}
	for _, p := range patterns {
		re, err := fnmatchRegexp(p)
		if err != nil {
			return nil, fmt.Errorf("--include pattern %q: %v", p, err)
		}
		m.res = append(m.res, re)
	}
	return m, nil
}

// Match reports whether the repository path name is selected.
func (m *Matcher) Match(name string) bool {
	if m.topLevel && strings.Contains(name, "/") {
		return false
	}
	for _, re := range m.res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// fnmatchRegexp translates one fnmatch pattern to an anchored regexp.
func fnmatchRegexp(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, fmt.Errorf("empty pattern")
	}
	if strings.HasSuffix(p, "/") {
		p += "*"
	}
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) { // no closing bracket: a literal '['
				b.WriteString(`\[`)
				continue
			}
			set := p[i+1 : j]
			i = j
			neg := strings.HasPrefix(set, "!")
			if neg {
				set = set[1:]
			}
			set = strings.ReplaceAll(set, `\`, `\\`)
			if neg {
				b.WriteString(`[^` + set + `]`)
			} else {
				b.WriteString(`[` + strings.ReplaceAll(set, "^", `\^`) + `]`)
			}
		default: // a literal run, kept whole so multi-byte characters survive
			j := i + 1
			for j < len(p) && !strings.ContainsRune("*?[", rune(p[j])) {
				j++
			}
			b.WriteString(regexp.QuoteMeta(p[i:j]))
			i = j - 1
		}
	}
	b.WriteString(`)$`)
	return regexp.Compile(b.String())
}
