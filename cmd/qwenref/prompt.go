package main

import (
	"fmt"
	"io"
)

func init() {
	register(&command{name: "prompt", summary: "print the prompt a checkpoint's chat template renders for a conversation (reads no weights)", run: runPrompt})
}

func runPrompt(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("prompt", "--model DIR|org/name (--messages F | --prompt TEXT) [--tools F] [--chat-template-file F] [--chat-template-kwargs JSON] [--no-generation-prompt]", `
Prints exactly what transformers' apply_chat_template(messages, tools=tools,
tokenize=False, add_generation_prompt=True, **kwargs) returns for the
conversation, and nothing else (no newline is added). It reads the
checkpoint's template files only (chat_template.jinja, tokenizer_config.json,
chat_template.json), never its weights; a template error is one line with
the template's own message.

The conversation is --messages FILE.json (a JSON array of messages, or
{"messages": [...], "tools": [...]}) with --system before it and --prompt
TEXT as a last user turn. --chat-template-kwargs '{"enable_thinking": false}'
passes keyword arguments (--think / --no-think set enable_thinking too);
--no-generation-prompt leaves the assistant turn's opening out.

Examples:
  qwenref prompt --model Qwen/Qwen3.5-0.8B --messages chat.json
  qwenref prompt --model DIR --prompt "Hi!" --chat-template-kwargs '{"enable_thinking": false}'
  qwenref prompt --chat-template-file template.jinja --messages chat.json --no-generation-prompt`, stderr)
	dir := addModelFlag(fs, " (its chat template and special tokens)")
	promptFlag := fs.String("prompt", "", "a last user message (- reads stdin)")
	cf := addChatFlags(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" && *cf.file == "" {
		return usageError(fs, stderr, "missing --model (or --chat-template-file)")
	}
	prompt, havePrompt, err := readPrompt(*promptFlag, "")
	if err != nil {
		return err
	}
	if !havePrompt && cf.messages() == "" {
		return usageError(fs, stderr, "missing --messages (or --prompt)")
	}
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	tpl, err := cf.template(*dir, false, stderr)
	if err != nil {
		return err
	}
	text, err := cf.render(fs, tpl, prompt, stderr)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(stdout, text)
	return err
}
