package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tokenizer"
)

func init() {
	register(&command{name: "chat", summary: "talk with a checkpoint: its chat template, streamed replies, caches kept across turns", run: runChat})
}

func runChat(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("chat", "[--model DIR] [--system S] [--think|--no-think] [--backend B] [--max-new-tokens N]", `
An interactive conversation, as llama-cli's conversation mode: each line of
stdin is a user message, rendered with the checkpoint's chat template
(or --chat-template-file) into the whole conversation, and the reply is
streamed to stdout. The caches are kept across turns, so a turn prefills
only the tokens its render adds; where the template rewrites an earlier
turn (Qwen's drop earlier replies' reasoning), the turn resumes from a
saved state, or prefills the conversation again, and a line on stderr says
so. End of input ends the chat.

Commands:
`+model.ChatCommands+`

Sampling is generation_config.json's, with the flags of run (--temperature,
--top-k, --top-p, --min-p, --repetition-penalty, --seed, --greedy).

Examples:
  qwenref chat --model Qwen/Qwen3.5-0.8B --system "Be brief."
  printf 'Hi!\n/no-think\nWhat is 2+2?\n' | qwenref chat --model DIR --quiet`, stderr)
	dir := addModelFlag(fs, demoModel)
	tokPath := fs.String("tokenizer", "", "tokenizer.json to use instead of DIR/tokenizer.json")
	cf := addChatFlags(fs)
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	sf := addSampleFlags(fs, model.DefaultReplyTokens)
	quiet := fs.Bool("quiet", false, "leave out the speeds and the notes on the caches (stderr)")
	mem := addMemoryFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := sf.checkMaxNew(fs, stderr); err != nil {
		return err
	}
	if cf.messages() != "" || *cf.noGen {
		return usageError(fs, stderr, "--messages and --no-generation-prompt do not apply to chat")
	}
	info := stderr
	if *quiet {
		info = io.Discard
	}
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	tpl, err := cf.template(*dir, true, stderr)
	if err != nil {
		return err
	}
	vars, _, err := cf.vars(fs, tpl, stderr)
	if err != nil {
		return err
	}
	var tools json.RawMessage
	if *cf.tools != "" {
		if tools, err = readArg("--tools", *cf.tools); err != nil {
			return err
		}
	}
	g, err := sf.settings(fs, *dir, info)
	if err != nil {
		return err
	}
	var demo *tokenizer.Tokenizer
	op, err := openFlags{dir: dir, backend: backend, plugins: plugins, mem: mem}.open(model.OpenOptions{}, &demo, stderr, info)
	if err != nil {
		return err
	}
	defer op.Close()
	tok, err := textTokenizer(op, *tokPath, demo, stderr)
	if err != nil {
		return err
	}
	conv, err := op.Model.NewConversation(model.ConversationOptions{Template: tpl, Codec: tok, Backend: op.Backend,
		Sampling: g.Config, Seed: g.Seed, MaxNewTokens: *sf.maxNew, System: *cf.system, Vars: vars, Tools: tools,
		Check: func(n int) error { return op.CheckRun(1, n, 1, "the conversation plus --max-new-tokens") }})
	if err != nil {
		return err
	}
	defer conv.Close()
	fmt.Fprintln(info, "chat: type a message; /help lists the commands; /exit or end of input ends")
	return conv.Chat(model.ChatIO{In: stdin, Out: stdout, Notes: textWriter{stderr}, Info: info, Prompt: func() {
		if isTerminal(stdin) {
			fmt.Fprint(stderr, "> ")
		}
	}})
}

// textWriter passes each write through safeio.Text: a note or a turn's
// error can repeat what the user typed (an unknown /command), terminal
// controls included.
type textWriter struct{ w io.Writer }

func (t textWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, safeio.Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
