package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/qwenref/qwenref/chat"
)

// chatFlags are run's conversation flags.
type chatFlags struct {
	chat, think, noThink *bool
	system, msgs, tools  *string
}

func addChatFlags(fs *flag.FlagSet) chatFlags {
	return chatFlags{
		chat:    fs.Bool("chat", false, "render the checkpoint's chat template around the prompt (a user turn)"),
		system:  fs.String("system", "", "system message (implies --chat)"),
		think:   fs.Bool("think", false, "set the template's enable_thinking to true (implies --chat)"),
		noThink: fs.Bool("no-think", false, "set the template's enable_thinking to false (implies --chat)"),
		msgs:    fs.String("messages", "", "conversation JSON file (- for stdin): [{\"role\":…,\"content\":…}, …] or {\"messages\": […], \"tools\": […]} (implies --chat)"),
		tools:   fs.String("tools", "", "JSON file with an array of tool schemas for the template (implies --chat)"),
	}
}

func (c chatFlags) messages() string { return *c.msgs }

// enabled reports whether any flag asks for the chat template.
func (c chatFlags) enabled(fs *flag.FlagSet) bool {
	for _, n := range []string{"chat", "system", "think", "no-think", "messages", "tools"} {
		if flagWasSet(fs, n) {
			return true
		}
	}
	return false
}

// loadTemplate loads a checkpoint's chat template, or ChatML with a notice
// when it has none (or for the bundled demo).
func loadTemplate(dir string, stderr io.Writer) (*chat.Template, error) {
	if dir != "" {
		tpl, err := chat.Load(dir)
		if err == nil {
			return tpl, nil
		}
		if !errors.Is(err, chat.ErrNoTemplate) {
			return nil, err
		}
	}
	where := "the bundled demo has no chat template"
	if dir != "" {
		where = dir + " ships no chat template (no chat_template.jinja, none in tokenizer_config.json)"
	}
	fmt.Fprintf(stderr, "notice: %s: using plain ChatML (<|im_start|>role … <|im_end|>)\n", where)
	return chat.MustParse(chat.ChatML, "ChatML"), nil
}

// render builds the conversation (--messages, or --system and the prompt
// as a user turn) and renders it with the generation prompt appended.
func (c chatFlags) render(fs *flag.FlagSet, tpl *chat.Template, prompt string, stderr io.Writer) (string, error) {
	if *c.think && *c.noThink {
		return "", usageError(fs, stderr, "give --think or --no-think, not both")
	}
	var msgs []json.RawMessage
	var tools json.RawMessage
	if *c.msgs != "" {
		data, err := readArg("--messages", *c.msgs)
		if err != nil {
			return "", err
		}
		data = bytes.TrimSpace(data)
		if len(data) > 0 && data[0] == '{' {
			var conv struct {
				Messages []json.RawMessage `json:"messages"`
				Tools    json.RawMessage   `json:"tools"`
			}
			if err := json.Unmarshal(data, &conv); err != nil {
				return "", fmt.Errorf("--messages %s: %w", *c.msgs, err)
			}
			msgs, tools = conv.Messages, conv.Tools
		} else if err := json.Unmarshal(data, &msgs); err != nil {
			return "", fmt.Errorf("--messages %s: want a JSON array of messages or {\"messages\": [...]}: %w", *c.msgs, err)
		}
		if len(msgs) == 0 {
			return "", fmt.Errorf("--messages %s: the conversation has no messages", *c.msgs)
		}
	}
	if *c.system != "" {
		msgs = append([]json.RawMessage{turn("system", *c.system)}, msgs...)
	}
	if prompt != "" || *c.msgs == "" {
		msgs = append(msgs, turn("user", prompt))
	}
	if *c.tools != "" {
		data, err := readArg("--tools", *c.tools)
		if err != nil {
			return "", err
		}
		var list []json.RawMessage
		if err := json.Unmarshal(data, &list); err != nil {
			return "", fmt.Errorf("--tools %s: want a JSON array of tool schemas: %w", *c.tools, err)
		}
		tools = data
	}
	vars := map[string]any{}
	if *c.think || *c.noThink {
		if tpl.UsesThinking() {
			vars["enable_thinking"] = *c.think
		} else {
			fmt.Fprintf(stderr, "warning: %s has no enable_thinking switch: --think/--no-think ignored\n", tpl.Origin)
		}
	}
	all, _ := json.Marshal(msgs)
	return tpl.Render(chat.Input{Messages: all, Tools: tools, AddGenerationPrompt: true, Vars: vars})
}

// turn is one message as JSON.
func turn(role, content string) json.RawMessage {
	b, _ := json.Marshal(chat.Message{Role: role, Content: content})
	return b
}
