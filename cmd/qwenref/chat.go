package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "chat", summary: "talk with a checkpoint: its chat template, streamed replies, caches kept across turns", run: runChat})
}

func runChat(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("chat", "[--model DIR] [--system S] [--think|--no-think] [--reasoning MODE] [--messages F.json [--continue-final-message]] [-n N]", `
An interactive conversation, as llama-cli's conversation mode: each line of
stdin is a user message, rendered with the checkpoint's chat template
(or --chat-template-file) into the whole conversation, and the reply is
streamed to stdout. The caches are kept across turns, so a turn prefills
only the tokens its render adds; where the template rewrites an earlier
turn (Qwen's drop earlier replies' reasoning), the turn resumes from a
saved state, or prefills the conversation again, and a line on stderr says
so. A reply runs until its end-of-turn token, bounded by the context (and
--max-memory); -n caps it. Its reasoning (<think>…</think>) is shown apart
from the answer: dimmed on a terminal, labelled elsewhere (--reasoning).
--messages F.json starts from a conversation; --continue-final-message
makes the first reply continue its final message, an assistant's.

On a terminal, a line can be edited, Up and Down walk the history (kept in
$XDG_STATE_HOME/qwenref/chat_history, else ~/.local/state/qwenref; see
--no-history), a line ending in \ or Alt-Enter continues on the next, and a
paste keeps its newlines. Ctrl-C stops a reply and keeps it as far as it
went; Ctrl-C on an empty line, Ctrl-D or /exit ends the chat. From a pipe,
each line is a message and end of input ends the chat.

Commands:
`+generate.ChatCommands+`

Sampling is generation_config.json's, with the flags of run (--temperature,
--top-k, --top-p, --min-p, --repetition-penalty, --seed, --greedy).

Examples:
  qwenref chat --model Qwen/Qwen3.5-0.8B --system "Be brief."
  printf 'Hi!\n/no-think\nWhat is 2+2?\n' | qwenref chat --model DIR --quiet`, stderr)
	dir := addModelFlag(fs, demoModel)
	tokPath := fs.String("tokenizer", "", "tokenizer.json to use instead of DIR/tokenizer.json")
	cf := addChatFlags(fs, false)
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	sf := addSampleFlags(fs, 0)
	fs.IntVar(sf.maxNew, "n", 0, "the same as --max-new-tokens: cap each reply at N tokens (0: until its end-of-turn token)")
	reasoning := addReasoningFlag(fs, "how replies show their")
	noHistory := fs.Bool("no-history", false, "keep no history of what is typed on a terminal")
	quiet := fs.Bool("quiet", false, "leave out the speeds and the notes on the caches (stderr)")
	mem := addMemoryFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *sf.maxNew != 0 {
		if err := sf.checkMaxNew(fs, stderr); err != nil {
			return err
		}
	}
	if err := generate.CheckReasoning(*reasoning); err != nil {
		return usageError(fs, stderr, "%v", err)
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
	cont := vars["continue_final_message"] == true // the first reply continues --messages' last; then turns as usual
	delete(vars, "continue_final_message")
	var msgs []json.RawMessage
	var tools json.RawMessage
	if *cf.msgs != "" { // - reads stdin to its end: no lines follow

		data, err := readArg("--messages", *cf.msgs)
		if err != nil {
			return err
		}
		if msgs, tools, err = chat.ParseConversation(data); err != nil {
			return fmt.Errorf("--messages %s: %w", *cf.msgs, err)
		}
	}
	if err := generate.CheckContinuable(msgs); cont && err != nil {
		return fmt.Errorf("--continue-final-message continues the last message of --messages: %w", err)
	}
	if *cf.tools != "" {
		if tools, err = readArg("--tools", *cf.tools); err != nil {
			return err
		}
	}
	g, err := sf.settings(fs, *dir, info)
	if err != nil {
		return err
	}
	op, tok, err := openFlags{dir: dir, backend: backend, plugins: plugins, mem: mem}.openText(model.OpenOptions{BoundHeap: true}, *tokPath, stderr, info)
	if err != nil {
		return err
	}
	defer op.Close()
	conv, err := generate.NewConversation(op.Model, generate.ConversationOptions{Template: tpl, Codec: tok, Backend: op.Backend,
		Sampling: g.Config, Seed: g.Seed, MaxNewTokens: *sf.maxNew, System: *cf.system, Messages: msgs, Vars: vars, Tools: tools,
		Check: func(prefill, n int) error {
			return op.CheckGeneration(1, prefill, n, 1, "the conversation plus its reply")
		}})
	if err != nil {
		return err
	}
	defer conv.Close()
	cio := generate.ChatIO{In: stdin, Out: stdout, Notes: stderr, Info: info, Reasoning: *reasoning, Dim: isTerminal(stdout), Continue: cont}
	if f, ok := stdin.(*os.File); ok && isTerminal(f) {
		cio.Terminal, cio.Screen = f, stderr
		if !*noHistory {
			cio.HistoryFile = generate.HistoryFile()
		}
	}
	return conv.Chat(cio)
}
