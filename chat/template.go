// Package chat renders a checkpoint's chat template: the Jinja program in
// chat_template.jinja or tokenizer_config.json that turns a conversation
// (messages, optional tools) into the prompt text the model was trained on,
// as transformers' apply_chat_template does.
//
// The package has its own Jinja engine, written for this: the subset of
// Jinja2 chat templates use, with Python's value semantics (str, repr,
// None, True/False, str.strip's whitespace, dict order), in the
// environment transformers sets up: a sandbox where lists and dicts cannot
// be changed, trim_blocks and lstrip_blocks on, the loop controls break and
// continue, a tojson filter that writes what Python's json.dumps writes
// (ensure_ascii off, key order kept), raise_exception and strftime_now.
// Templates cannot include, import or extend other templates.
//
// A template is a program from the checkpoint, so parsing and rendering are
// bounded (see MaxParseDepth, MaxSteps, MaxOutputBytes and the other
// limits): Render runs in the caller's goroutine, checks its step budget,
// deadline and memory budget as it goes, and leaves nothing running when it
// returns. Errors are one line: the template's origin, line and message.
package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
)

// ErrNoTemplate means a checkpoint directory ships no chat template.
var ErrNoTemplate = errors.New("no chat template")

// errInternal marks a bug in the renderer (a recovered panic), which the
// fuzz targets look for.
var errInternal = errors.New("the chat template renderer failed")

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
	body    []node
	lim     *renderLimits // nil: the exported limits
}

// Message is one plain conversation turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Input is one conversation to render.
type Input struct {
	// Messages is a JSON array of message objects, as transformers takes
	// them: each has a string "role", and any fields the template reads
	// (content as a string or a list of parts, tool_calls,
	// reasoning_content, …).
	Messages json.RawMessage
	// Tools is an optional JSON array of tool (function) schema objects.
	Tools json.RawMessage
	// Documents is an optional JSON array of document objects (for
	// retrieval-augmented templates), passed to the template as documents.
	Documents json.RawMessage
	// AddGenerationPrompt appends the assistant turn's opening; false
	// renders the conversation as it stands.
	AddGenerationPrompt bool
	// ContinueFinalMessage cuts the text after the final message's content,
	// so that the model continues that message, as apply_chat_template's
	// continue_final_message does; it cannot go with AddGenerationPrompt.
	ContinueFinalMessage bool
	// Vars are further template variables (apply_chat_template's keyword
	// arguments), e.g. "enable_thinking": false. The keys tools, documents,
	// add_generation_prompt and continue_final_message are
	// apply_chat_template's own parameters, not variables: given here they
	// act as the fields above (and may not be given in both places). Values may be Go bools,
	// strings, numbers, nil, []any and map[string]any (keys sorted), or
	// json.RawMessage and json.Number, read as Python's json.loads reads
	// them; anything else goes through its JSON encoding. A variable left
	// out is undefined in the template, as in Python.
	Vars map[string]any
}

// Parse compiles a template; origin names it in errors.
func Parse(src, origin string) (*Template, error) {
	if len(src) > MaxTemplateBytes {
		return nil, fmt.Errorf("%s: the chat template is %d bytes, more than the limit of %d: %w", origin, len(src), MaxTemplateBytes, ErrLimit)
	}
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("%s: the chat template is not valid UTF-8 (at byte %d)", origin, safeio.InvalidUTF8At([]byte(src)))
	}
	body, err := parseTemplate(src)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			te.Origin = origin
			return nil, te
		}
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	return &Template{Source: src, Origin: origin, body: body, SpecialTokens: map[string]string{}}, nil
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

// Render renders one conversation. It returns when the template finishes,
// fails, or passes a limit (Timeout included), and leaves nothing running.
func (t *Template) Render(in Input) (string, error) {
	return t.RenderContext(context.Background(), in)
}

// RenderContext is Render that also stops when ctx is done.
func (t *Template) RenderContext(ctx context.Context, in Input) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("%s: %w: %s", t.Origin, errInternal, oneLine(fmt.Sprint(p)))
		}
	}()
	vars, cont, err := t.inputVars(in)
	if err != nil {
		return "", err
	}
	limit := t.Timeout
	if limit <= 0 {
		limit = DefaultTimeout
	}
	r := &renderer{ctx: ctx, deadline: time.Now().Add(limit), timeout: limit, lim: defaultLimits}
	if t.lim != nil {
		r.lim = *t.lim
	}
	base := mapScope(globals, nil)
	ctxScope := mapScope(vars, base)
	if err := r.exec(t.body, newScope(ctxScope)); err != nil {
		if err == errBreak || err == errContinue {
			return string(r.out), nil
		}
		var te *Error
		if errors.As(err, &te) {
			te.Origin = t.Origin
			return "", te
		}
		return "", fmt.Errorf("%s: %s", t.Origin, oneLine(err.Error()))
	}
	if cont {
		return continueFinal(string(r.out), vars["messages"])
	}
	return string(r.out), nil
}

// inputVars checks a conversation and makes the template's variables, as
// apply_chat_template passes them: the special tokens, the keyword
// arguments, messages, tools, documents and add_generation_prompt.
func (t *Template) inputVars(in Input) (vars map[string]value, cont bool, err error) {
	size := len(in.Messages) + len(in.Tools) + len(in.Documents)
	var varsJSON []byte
	if len(in.Vars) > 0 {
		var buf bytes.Buffer // measured as written: json.Marshal makes each < six bytes
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(in.Vars); err != nil {
			return nil, false, fmt.Errorf("vars: %w", err)
		}
		varsJSON = buf.Bytes()
		size += len(varsJSON) - 1 // Encode's newline
	}
	if size > MaxInputBytes {
		return nil, false, fmt.Errorf("the conversation is %d bytes of JSON, more than the limit of %d: %w", size, MaxInputBytes, ErrLimit)
	}
	msgs, err := decodeJSON(in.Messages)
	if err != nil {
		return nil, false, fmt.Errorf("messages: %s", oneLine(err.Error()))
	}
	msgList, ok := msgs.(*list)
	if !ok {
		return nil, false, errors.New("messages: want a JSON array of message objects")
	}
	for i, m := range msgList.items {
		d, ok := m.(*dict)
		if !ok {
			return nil, false, fmt.Errorf("messages[%d]: want a message object, got %s", i, jsonTypeName(m))
		}
		role, ok := d.getStr("role")
		if _, isStr := role.(string); !ok || !isStr {
			return nil, false, fmt.Errorf("messages[%d]: the message has no string \"role\"", i)
		}
	}
	vars = map[string]value{}
	for k, v := range t.SpecialTokens {
		vars[k] = v
	}
	for k, v := range in.Vars {
		val, err := goValue(v, 0)
		if err != nil {
			return nil, false, fmt.Errorf("vars[%q]: %s", excerpt(k), oneLine(err.Error()))
		}
		vars[k] = val
	}
	p, err := takeParams(in, vars)
	if err != nil {
		return nil, false, err
	}
	vars["messages"] = msgs
	vars["tools"] = p.tools
	vars["documents"] = p.documents
	vars["add_generation_prompt"] = p.gen
	return vars, p.cont, nil
}

func jsonTypeName(v value) string {
	switch v.(type) {
	case string:
		return "a string"
	case *list:
		return "an array"
	case noneType:
		return "null"
	case bool:
		return "a boolean"
	case *dict:
		return "an object"
	}
	return "a number"
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

// LoadFile reads a chat template from a file: a .json file is read as a
// tokenizer_config.json or chat_template.json (its "chat_template", and any
// special tokens), anything else as the Jinja text itself.
func LoadFile(path string) (*Template, error) {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		if _, err := os.Stat(path); err != nil {
			return nil, err
		}
		special, src, err := readTokenizerConfig(path)
		if err != nil {
			return nil, err
		}
		if src == "" {
			return nil, fmt.Errorf("%s: %w (no \"chat_template\" in it)", path, ErrNoTemplate)
		}
		t, err := Parse(src, path)
		if err != nil {
			return nil, err
		}
		t.SpecialTokens = special
		return t, nil
	}
	b, err := readCapped(path)
	if err != nil {
		return nil, err
	}
	return Parse(string(b), path)
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
