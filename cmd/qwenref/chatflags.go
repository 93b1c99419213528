package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/internal/safeio"
)

// chatFlags are the conversation flags of run, prompt, chat and perplexity.
type chatFlags struct {
	chat, think, noThink, noGen, cont       *bool
	system, msgs, tools, file, kwargs, docs *string
	reply                                   bool // a reply continues the final message: an assistant's (run)
}

// A chat has no --no-generation-prompt (one-shot's): it is left
// unregistered, so its help does not list it.
func addChatFlags(fs *flag.FlagSet, oneShot bool) chatFlags {
	c := chatFlags{
		chat:    fs.Bool("chat", false, "render the checkpoint's chat template around the prompt (a user turn)"),
		system:  fs.String("system", "", "system message (implies --chat)"),
		think:   fs.Bool("think", false, "set the template's enable_thinking to true (implies --chat)"),
		noThink: fs.Bool("no-think", false, "set the template's enable_thinking to false (implies --chat)"),
		tools:   fs.String("tools", "", "JSON file with an array of tool schemas for the template (implies --chat)"),
		file:    fs.String("chat-template-file", "", "chat template to use instead of the checkpoint's: a Jinja file, or a tokenizer_config.json or chat_template.json (implies --chat)"),
		kwargs:  fs.String("chat-template-kwargs", "", "JSON object of template variables, as apply_chat_template's keyword arguments, e.g. '{\"enable_thinking\": false}' (implies --chat)"),
		docs:    fs.String("documents", "", "JSON file with an array of documents for the template, e.g. [{\"title\": …, \"text\": …}] (implies --chat)"),
		msgs:    fs.String("messages", "", "conversation JSON file (- for stdin): [{\"role\":…,\"content\":…}, …] or {\"messages\": […], \"tools\": […]} (implies --chat)"),
		cont:    fs.Bool("continue-final-message", false, "end the text after the final message's content, for the model to continue it (continue_final_message=True; no generation prompt) (implies --chat)"),
		noGen:   new(bool),
	}
	if oneShot {
		c.noGen = fs.Bool("no-generation-prompt", false, "leave out the assistant turn's opening (add_generation_prompt=False) (implies --chat)")
	}
	return c
}

// addReasoningFlag is --reasoning of run and chat; what begins its help.
func addReasoningFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("reasoning", generate.ReasoningShow, what+" reasoning (<think>…</think>): show (apart from the answer: dimmed on a terminal, labelled elsewhere), hide, or raw (as generated)")
}

func (c chatFlags) messages() string { return *c.msgs }

// enabled reports whether any flag asks for the chat template.
func (c chatFlags) enabled(fs *flag.FlagSet) bool {
	for _, n := range []string{"chat", "system", "think", "no-think", "messages", "tools", "chat-template-file", "chat-template-kwargs", "no-generation-prompt", "documents", "continue-final-message"} {
		if flagWasSet(fs, n) {
			return true
		}
	}
	return false
}

// template loads --chat-template-file or the checkpoint's chat template; a
// checkpoint without one (or the bundled demo) gets plain ChatML with a
// notice when chatML, and is an error otherwise.
func (c chatFlags) template(dir string, chatML bool, stderr io.Writer) (*chat.Template, error) {
	if dir != "" || *c.file != "" {
		tpl, err := chat.LoadOverride(dir, *c.file)
		if err == nil || *c.file != "" || !errors.Is(err, chat.ErrNoTemplate) {
			return tpl, err
		}
	}
	where := "the bundled demo has no chat template"
	if dir != "" {
		where = shown(dir) + " ships no chat template (no chat_template.jinja, none in tokenizer_config.json)"
	}
	if !chatML {
		return nil, fmt.Errorf("%s: pass --chat-template-file", where)
	}
	fmt.Fprintf(stderr, "notice: %s: using plain ChatML (<|im_start|>role … <|im_end|>)\n", safeio.Clean(where))
	return chat.MustParse(chat.ChatML, "ChatML"), nil
}

// render builds the conversation (--messages, --system, and the prompt as
// a user turn) and renders it as apply_chat_template(tokenize=False) does,
// with the generation prompt unless --no-generation-prompt.
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
		if msgs, tools, err = chat.ParseConversation(data); err != nil {
			return "", fmt.Errorf("--messages %s: %w", *c.msgs, err)
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
	vars, gen, err := c.vars(fs, tpl, stderr)
	if err != nil {
		return "", err
	}
	if err := generate.CheckContinuable(msgs); c.reply && vars["continue_final_message"] == true && err != nil {
		return "", fmt.Errorf("--continue-final-message: %w%s", err, map[bool]string{true: " (--prompt adds a user message last)"}[prompt != ""])
	}
	all, _ := json.Marshal(msgs)
	return tpl.Render(chat.Input{Messages: all, Tools: tools, AddGenerationPrompt: gen, Vars: vars})
}

// vars are --chat-template-kwargs with --think / --no-think, --documents and
// --continue-final-message over them, and whether to add the generation prompt.
func (c chatFlags) vars(fs *flag.FlagSet, tpl *chat.Template, stderr io.Writer) (map[string]any, bool, error) {
	vars, gen, g := map[string]any{}, !*c.noGen, (*bool)(nil)
	if *c.kwargs != "" {
		v, pg, err := chat.ParseVars([]byte(*c.kwargs))
		if err != nil {
			return nil, false, usageError(fs, stderr, "--chat-template-kwargs: %v", err)
		}
		if vars, g = v, pg; g != nil && !*c.noGen {
			gen = *g
		}
	}
	if r, _ := vars["continue_final_message"].(json.RawMessage); *c.cont || string(r) == "true" {
		vars["continue_final_message"], gen = true, gen && g != nil // no generation prompt unless asked for (refused)
	}
	if *c.docs != "" {
		data, err := readArg("--documents", *c.docs)
		var list []map[string]json.RawMessage
		if err == nil && json.Unmarshal(data, &list) != nil {
			err = fmt.Errorf("--documents %s: want a JSON array of document objects", *c.docs)
		}
		if _, dup := vars["documents"]; err == nil && dup {
			err = usageError(fs, stderr, "give the documents with --documents or in --chat-template-kwargs, not both")
		}
		if err != nil {
			return nil, false, err
		}
		vars["documents"] = json.RawMessage(data)
	}
	if *c.think || *c.noThink {
		if tpl.UsesThinking() {
			vars["enable_thinking"] = *c.think
		} else {
			fmt.Fprintf(stderr, "warning: %s has no enable_thinking switch: --think/--no-think ignored\n", safeio.Clean(tpl.Origin))
		}
	}
	return vars, gen, nil
}

// turn is one message as JSON.
func turn(role, content string) json.RawMessage {
	b, _ := json.Marshal(chat.Message{Role: role, Content: content})
	return b
}
