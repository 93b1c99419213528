// Package chat renders a checkpoint's chat template: the Jinja program in
// chat_template.jinja or tokenizer_config.json that turns a conversation
// (messages, optional tools) into the prompt text the model was trained on,
// as transformers' apply_chat_template does.
//
// Rendering uses github.com/nikolalohinski/gonja/v2 with the environment
// transformers sets up: trim_blocks and lstrip_blocks on, a tojson filter
// that writes what Python's json.dumps writes (key order kept, ", " and ": "
// separators, no HTML escaping), raise_exception and strftime_now. Objects
// keep their JSON key order, as Python dicts do. Templates cannot include or
// import other files.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/qwenref/qwenref/internal/safeio"
)

// ErrNoTemplate means a checkpoint directory ships no chat template.
var ErrNoTemplate = errors.New("no chat template")

// ChatML is the plain ChatML template (<|im_start|>role … <|im_end|>), the
// fallback for checkpoints without a template of their own.
const ChatML = `{% for message in messages %}{{ '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// Template is a parsed chat template. It is safe for concurrent use.
type Template struct {
	// Source is the Jinja text; Origin says where it came from.
	Source, Origin string
	// SpecialTokens are the tokenizer config's named tokens (bos_token,
	// eos_token, …), passed to the template as transformers does.
	SpecialTokens map[string]string
	// Timeout bounds one Render (a template is a program from the
	// checkpoint and may loop); 0 means DefaultTimeout.
	Timeout time.Duration
	tpl     *exec.Template
}

// DefaultTimeout is how long Render waits for a template by default.
const DefaultTimeout = 10 * time.Second

// Message is one plain conversation turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Input is one conversation to render.
type Input struct {
	// Messages is a JSON array of message objects, as transformers takes
	// them (role, content, and any fields the template reads, such as
	// tool_calls or reasoning_content).
	Messages json.RawMessage
	// Tools is an optional JSON array of tool (function) schemas.
	Tools json.RawMessage
	// AddGenerationPrompt appends the assistant turn's opening.
	AddGenerationPrompt bool
	// Vars are further template variables, e.g. "enable_thinking": false.
	// A variable left out is undefined in the template, as in Python.
	Vars map[string]any
}

// Parse compiles a template; origin names it in errors.
func Parse(src, origin string) (*Template, error) {
	cfg := config.New()
	cfg.TrimBlocks, cfg.LeftStripBlocks = true, true
	env := &exec.Environment{
		Context:           exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables).Update(exec.NewContext(globals)),
		Filters:           exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters),
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
	if err := env.Filters.Replace("tojson", filterToJSON); err != nil {
		return nil, err
	}
	if err := env.Filters.Replace("items", filterItems); err != nil {
		return nil, err
	}
	tpl, err := exec.NewTemplate("chat_template", cfg, rootOnly{src: src}, env)
	if err != nil {
		return nil, fmt.Errorf("%s: parsing the chat template: %w", origin, err)
	}
	return &Template{Source: src, Origin: origin, tpl: tpl, SpecialTokens: map[string]string{}}, nil
}

// MustParse is Parse for templates known to be valid (e.g. ChatML).
func MustParse(src, origin string) *Template {
	t, err := Parse(src, origin)
	if err != nil {
		panic(err)
	}
	return t
}

// UsesThinking reports whether the template reads enable_thinking.
func (t *Template) UsesThinking() bool { return strings.Contains(t.Source, "enable_thinking") }

// Render renders one conversation. A template that runs past Timeout is
// an error (its goroutine is left to finish on its own).
func (t *Template) Render(in Input) (string, error) {
	type result struct {
		s   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := t.render(in)
		done <- result{s, err}
	}()
	limit := t.Timeout
	if limit <= 0 {
		limit = DefaultTimeout
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.s, r.err
	case <-timer.C:
		return "", fmt.Errorf("%s: the chat template did not finish within %v", t.Origin, limit)
	}
}

func (t *Template) render(in Input) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: rendering the chat template failed: %v", t.Origin, r)
		}
	}()
	msgs, err := decodeJSON(in.Messages)
	if err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	if _, ok := msgs.([]any); !ok {
		return "", errors.New("messages: want a JSON array of message objects")
	}
	var tools any
	if len(bytes.TrimSpace(in.Tools)) > 0 {
		if tools, err = decodeJSON(in.Tools); err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
	}
	vars := map[string]any{}
	for k, v := range t.SpecialTokens {
		vars[k] = v
	}
	for k, v := range in.Vars {
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["tools"] = tools
	vars["documents"] = nil
	vars["add_generation_prompt"] = in.AddGenerationPrompt
	s, err := t.tpl.ExecuteToString(exec.NewContext(vars))
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.Origin, err)
	}
	return s, nil
}

// Messages encodes plain turns as Input.Messages.
func Messages(ms ...Message) json.RawMessage {
	if ms == nil {
		ms = []Message{}
	}
	b, _ := json.Marshal(ms)
	return b
}

// Load finds the chat template of a checkpoint directory the way
// transformers does: chat_template.jinja, else tokenizer_config.json's
// chat_template (a string, or a list of named templates of which "default"
// is used), else chat_template.json (processors of multimodal checkpoints).
// It returns ErrNoTemplate when there is none. The tokenizer config's
// special tokens are attached either way.
func Load(dir string) (*Template, error) {
	special, cfgTemplate, err := readTokenizerConfig(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	attach := func(t *Template, err error) (*Template, error) {
		if err != nil {
			return nil, err
		}
		t.SpecialTokens = special
		return t, nil
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if b, err := readCapped(jinjaPath); err == nil {
		return attach(Parse(string(b), jinjaPath))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if cfgTemplate != "" {
		return attach(Parse(cfgTemplate, filepath.Join(dir, "tokenizer_config.json")))
	}
	jsonPath := filepath.Join(dir, "chat_template.json")
	if b, err := readCapped(jsonPath); err == nil {
		var v struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", jsonPath, err)
		}
		src, err := pickTemplate(v.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", jsonPath, err)
		}
		if src != "" {
			return attach(Parse(src, jsonPath))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return nil, fmt.Errorf("%s: %w (no chat_template.jinja, and no chat_template in tokenizer_config.json)", dir, ErrNoTemplate)
}

// MaxFileBytes caps each template file read (chat_template.jinja,
// tokenizer_config.json, chat_template.json); real ones are kilobytes.
const MaxFileBytes = 16 << 20

// readCapped reads a template file without blocking on a FIFO or a device
// and without reading more than MaxFileBytes.
func readCapped(path string) ([]byte, error) {
	return safeio.ReadCapped(path, MaxFileBytes, "chat template file")
}

// readTokenizerConfig returns the named special tokens and the
// chat_template of a tokenizer_config.json; a missing file is no error.
func readTokenizerConfig(path string) (map[string]string, string, error) {
	special := map[string]string{}
	b, err := readCapped(path)
	if errors.Is(err, os.ErrNotExist) {
		return special, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	for _, name := range []string{"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token"} {
		var s string
		var added struct {
			Content string `json:"content"`
		}
		switch {
		case json.Unmarshal(raw[name], &s) == nil && s != "":
			special[name] = s
		case json.Unmarshal(raw[name], &added) == nil && added.Content != "":
			special[name] = added.Content
		}
	}
	src, err := pickTemplate(raw["chat_template"])
	if err != nil {
		return nil, "", fmt.Errorf("%s: chat_template: %w", path, err)
	}
	return special, src, nil
}

// pickTemplate reads a chat_template value: a string, or a list of
// {"name", "template"} of which "default" is taken.
func pickTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("want a string or a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	if len(named) > 0 {
		return "", fmt.Errorf("%d named templates but none called \"default\"", len(named))
	}
	return "", nil
}

// rootOnly serves the template itself and refuses every other name, so a
// template cannot read files through include, import or extends.
type rootOnly struct{ src string }

func (r rootOnly) Read(path string) (io.Reader, error) {
	if path != "chat_template" {
		return nil, fmt.Errorf("chat templates may not load other templates (asked for %q)", path)
	}
	return strings.NewReader(r.src), nil
}

func (r rootOnly) Resolve(path string) (string, error) { return path, nil }

func (r rootOnly) Inherit(string) (loaders.Loader, error) { return r, nil }
