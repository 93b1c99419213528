package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// ParseConversation reads a conversation file: a JSON array of message
// objects, or an object {"messages": [...], "tools": [...]} (tools may be
// left out). It returns the messages one by one, and the tools as given;
// an empty conversation is the template's to refuse.
func ParseConversation(data []byte) (msgs []json.RawMessage, tools json.RawMessage, err error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var conv struct {
			Messages []json.RawMessage `json:"messages"`
			Tools    json.RawMessage   `json:"tools"`
		}
		if err := json.Unmarshal(data, &conv); err != nil {
			return nil, nil, err
		}
		msgs, tools = conv.Messages, conv.Tools
	} else if err := json.Unmarshal(data, &msgs); err != nil {
		return nil, nil, fmt.Errorf("want a JSON array of messages or {\"messages\": [...]}: %w", err)
	}
	return msgs, tools, nil
}

// ParseVars reads apply_chat_template's keyword arguments from a JSON
// object, each value as Python's json.loads reads it (Input.Vars). The
// keyword add_generation_prompt, a parameter of apply_chat_template of its
// own, is returned apart: nil when the object does not set it.
func ParseVars(data []byte) (vars map[string]any, addGenerationPrompt *bool, err error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return nil, nil, fmt.Errorf("want a JSON object of keyword arguments, e.g. {\"enable_thinking\": false}: %v", errOr(err, "got null"))
	}
	vars = map[string]any{}
	for k, v := range raw {
		if k == "messages" || k == "conversation" { // transformers: TypeError, multiple values for the argument
			return nil, nil, fmt.Errorf("%q is the conversation itself, not a template keyword argument: give it with --messages", k)
		}
		if k == "add_generation_prompt" {
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return nil, nil, fmt.Errorf("add_generation_prompt must be true or false, got %s", v)
			}
			addGenerationPrompt = &b
			continue
		}
		vars[k] = v
	}
	return vars, addGenerationPrompt, nil
}

func errOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

// LoadOverride loads the template of apply_chat_template(...,
// chat_template=...) from file (LoadFile), with the special tokens of the
// checkpoint in dir ("" for none) where file does not name its own, as the
// tokenizer's still apply there. An empty file is Load(dir).
func LoadOverride(dir, file string) (*Template, error) {
	if file == "" {
		return Load(dir)
	}
	t, err := LoadFile(file)
	if err != nil || dir == "" || len(t.SpecialTokens) > 0 {
		return t, err
	}
	special, _, err := readTokenizerConfig(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	t.SpecialTokens = special
	return t, nil
}
