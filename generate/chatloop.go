package generate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"

	"github.com/qwenref/qwenref/internal/lineedit"
	"github.com/qwenref/qwenref/internal/safeio"
)

// ChatIO are the streams of Chat.
type ChatIO struct {
	// In gives the lines when Terminal is nil.
	In io.Reader
	// Out receives the replies, streamed, a newline after each.
	Out io.Writer
	// Notes receives the commands' notes and the errors of turns, their
	// terminal controls escaped (safeio.Text): they can repeat what was
	// typed (an unknown /command).
	Notes io.Writer
	// Info, if set, receives the greeting, how each turn reused the caches
	// and its speed.
	Info io.Writer
	// Prompt, if set, is called before each line of In is read.
	Prompt func()
	// Terminal, if set, is the terminal the chat is typed on, read in raw
	// mode by a line editor drawing on Screen (history, multi-line entries,
	// pastes of any length); Ctrl-C stops a reply and keeps it as far as
	// it went, and Ctrl-C on an empty entry or Ctrl-D ends the chat.
	Terminal *os.File
	Screen   io.Writer
	// HistoryFile, if set, keeps the terminal's entries across chats.
	HistoryFile string
	// Reasoning is how replies show their reasoning: ReasoningShow ("" too),
	// ReasoningHide or ReasoningRaw; Dim says Out takes ANSI styling.
	Reasoning string
	Dim       bool
	// Continue makes the first reply continue the conversation's final
	// message (Continue) before any entry is read; its error ends the chat.
	Continue bool
}

// MaxChatLine bounds one line Chat reads from In.
const MaxChatLine = 1 << 20

// Chat reads entries until /exit or the end of the input and handles each
// (Line). A turn that fails is reported on Notes and dropped, and the chat
// goes on; an error writing Out, or reading the input, ends it.
func (c *Conversation) Chat(s ChatIO) error {
	out := &firstError{w: s.Out}
	if s.Notes == nil {
		s.Notes = io.Discard
	}
	if s.Screen == nil {
		s.Screen = s.Notes // the line editor's, its controls kept
	}
	s.Notes = textWriter{s.Notes}
	info := s.Info
	if info == nil {
		info = io.Discard
	}
	mode := s.Reasoning
	if mode == "" {
		mode = ReasoningShow
	}
	if err := CheckReasoning(mode); err != nil {
		return err
	}
	// A chat idles between turns: what loading left free goes back to the
	// OS before the first, so the session holds what it uses.
	debug.FreeOSMemory()
	fmt.Fprintln(info, "chat: type a message; /help lists the commands; /exit, Ctrl-D or end of input ends")
	// show streams a turn's reply with its reasoning apart, and reports it.
	show := func(send func(stream func(string)) (LineResult, error)) (LineResult, error) {
		var f *reasoningFilter
		res, err := send(func(text string) {
			if f == nil {
				f = newReasoningFilter(mode, s.Dim, c.reasoning, func(t string) { io.WriteString(out, t) })
			}
			f.Add(text)
		})
		if f != nil {
			f.Flush()
		}
		if err != nil || out.err != nil {
			return res, err
		}
		if res.Note != "" {
			fmt.Fprintln(s.Notes, res.Note)
		}
		if r := res.Reply; r != nil {
			fmt.Fprintln(out, "")
			if r.StopReason == "interrupted" {
				fmt.Fprintln(s.Notes, "chat: stopped; the reply is kept as far as it went")
			}
			if r.Note != "" {
				fmt.Fprintln(info, r.Note)
			}
			fmt.Fprintf(info, "[%s]\n", r)
		}
		return res, nil
	}
	next, done, err := c.entries(s)
	if err != nil {
		return err
	}
	defer done()
	if s.Continue {
		if _, err := show(func(stream func(string)) (LineResult, error) {
			rep, err := c.Continue(stream)
			return LineResult{Reply: rep}, err
		}); err != nil || out.err != nil {
			return errors.Join(err, out.err)
		}
	}
	for {
		line, err := next()
		if errors.Is(err, io.EOF) || errors.Is(err, lineedit.ErrInterrupted) {
			break
		}
		if err != nil {
			return err
		}
		res, err := show(func(stream func(string)) (LineResult, error) { return c.Line(line, stream) })
		if out.err != nil {
			return out.err
		}
		if errors.Is(err, ErrInterrupted) {
			fmt.Fprintln(s.Notes, "") // past the terminal's ^C
		}
		if err != nil {
			fmt.Fprintf(s.Notes, "chat: %v\n", err)
			continue
		}
		if res.Exit {
			return out.err
		}
	}
	return out.err
}

// entries returns Chat's source of entries: In's lines, or the terminal's
// line editor with Ctrl-C caught for the replies; done undoes the setup.
func (c *Conversation) entries(s ChatIO) (next func() (string, error), done func(), err error) {
	if s.Terminal == nil {
		in := bufio.NewScanner(s.In)
		in.Buffer(nil, MaxChatLine)
		return func() (string, error) {
			if s.Prompt != nil {
				s.Prompt()
			}
			if in.Scan() {
				return in.Text(), nil
			}
			if err := in.Err(); err != nil {
				return "", fmt.Errorf("reading the chat's input: %w (a line may hold at most %d MiB)", err, MaxChatLine>>20)
			}
			return "", io.EOF
		}, func() {}, nil
	}
	screen := s.Screen // Chat set it
	fd := int(s.Terminal.Fd())
	ed := &lineedit.Editor{In: s.Terminal, Out: screen, Prompt: "> ", More: "… ", Width: func() int { return lineedit.Width(fd) }}
	if s.HistoryFile != "" {
		if ed.History, err = lineedit.LoadHistory(s.HistoryFile, 1000); err != nil {
			fmt.Fprintf(s.Notes, "chat: the history is not kept: %v\n", err)
			s.HistoryFile = ""
		}
	}
	// A terminal sends Ctrl-C as SIGINT while a reply runs (the editor's
	// raw mode reads it as a key): it stops the reply, not the chat.
	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() {
		for range sig {
			stop.Store(true)
		}
	}()
	prev := c.o.Stop
	c.o.Stop = func() bool { return stop.Load() || prev != nil && prev() }
	done = func() {
		signal.Stop(sig)
		close(sig)
		c.o.Stop = prev
	}
	return func() (string, error) {
		restore, err := lineedit.Raw(fd)
		if err != nil {
			return "", fmt.Errorf("the chat's terminal: %w", err)
		}
		line, err := ed.ReadLine()
		restore()
		stop.Store(false)
		if err == nil && s.HistoryFile != "" {
			if herr := lineedit.SaveHistory(s.HistoryFile, ed.History); herr != nil {
				fmt.Fprintf(s.Notes, "chat: the history is not kept: %v\n", herr)
				s.HistoryFile = ""
			}
		}
		return line, err
	}, done, nil
}

// HistoryFile is where a terminal chat keeps its history:
// $XDG_STATE_HOME/qwenref/chat_history, else under ~/.local/state ("" when
// there is no home to keep it in).
func HistoryFile() string {
	p, err := lineedit.HistoryPath("qwenref", "chat_history")
	if err != nil {
		return ""
	}
	return p
}

// textWriter passes each write through safeio.Text.
type textWriter struct{ w io.Writer }

func (t textWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, safeio.Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
