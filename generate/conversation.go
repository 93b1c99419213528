package generate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/sampling"
	"github.com/qwenref/qwenref/tensor"
)

// ConversationOptions configure NewConversation.
type ConversationOptions struct {
	// Template renders the conversation: the checkpoint's chat template.
	Template *chat.Template
	// Codec encodes the rendered text and decodes the replies: the
	// checkpoint's tokenizer.
	Codec TextCodec
	// Backend runs the model.
	Backend *model.Backend
	// Sampling chooses the replies' tokens (the zero Config is greedy);
	// Seed seeds its draws, a stream per turn.
	Sampling sampling.Config
	Seed     uint64
	// MaxNewTokens bounds a reply; 0 lets it run to its end-of-turn token,
	// bounded by Context and by what Check accepts.
	MaxNewTokens int
	// Context bounds the conversation's tokens (0: the config's
	// max_position_embeddings).
	Context int
	// EOS ids end a reply and are not part of its text; nil: the config's.
	EOS []int
	// System is the system message ("": none).
	System string
	// Messages are the conversation so far, after System: its first turn
	// adds to them, or continues the final one (Continue).
	Messages []json.RawMessage
	// Vars are the template's further variables (apply_chat_template's
	// keyword arguments), e.g. "enable_thinking".
	Vars map[string]any
	// Tools are the tool schemas the template declares (a JSON array).
	Tools json.RawMessage
	// Check, if set, bounds a turn before its prefill by what the turn
	// allocates: prefill is how many tokens it runs at once (what the
	// caches lack of the rendered conversation), tokens the conversation
	// plus the reply's budget, which the caches grow to. With MaxNewTokens
	// 0 the budget shrinks to the most Check accepts.
	Check func(prefill, tokens int) error
	// Stop, if set, is asked before each new token: true ends the reply
	// there (StopReason "interrupted"), and the turn is kept as far as it
	// went, as a reply cut by MaxNewTokens is.
	Stop func() bool
	// OnToken, if set, sees every new token with the logits it was drawn
	// from (valid during the call); false ends the reply.
	OnToken func(id int, logits []float32) bool
	// MaxSnapshots bounds the saved states a turn can resume from
	// (0: DefaultSnapshots).
	MaxSnapshots int
}

// DefaultSnapshots is ConversationOptions' default. DefaultReplyTokens
// is a bound for callers that want one (a conversation's replies have
// none by default: they run to their end-of-turn token).
const (
	DefaultSnapshots   = 2
	DefaultReplyTokens = 512
)

// Conversation is a chat with the model that keeps its caches across
// turns, so that a turn prefills only what the cache lacks.
//
// Each turn renders the whole conversation with the template and compares
// its token ids with the ids the caches hold. When those are a prefix of
// the new render, only the rest is prefilled. A template may rewrite
// earlier turns, though (Qwen's drop the reasoning of earlier replies), and
// Gated DeltaNet states cannot be rewound: so every turn saves the state
// at the end of the conversation before the reply's opening, which the
// next render usually starts with, and a turn whose render departs from
// the cache resumes from the latest saved state its render starts with, or
// prefills everything again. Reply.Note says so.
type Conversation struct {
	m        *model.Model
	o        ConversationOptions
	r        model.Runner
	rw       model.Rewinder // nil: the runner cannot go back
	msgs     []json.RawMessage
	system   string
	thinking *bool
	ids      []int // what the caches hold
	snaps    []*model.Snapshot
	turns    int
	render   *renderCache // the last render and its ids
	// reasoning is the latest Reply.Reasoning, for a stream's filter.
	reasoning bool
}

// NewConversation starts a conversation with m.
func NewConversation(m *model.Model, o ConversationOptions) (*Conversation, error) {
	switch {
	case o.Template == nil || o.Codec == nil || o.Backend == nil:
		return nil, errors.New("a conversation needs a template, a tokenizer and a backend")
	case o.MaxNewTokens < 0 || o.MaxSnapshots < 0:
		return nil, errors.New("a conversation's MaxNewTokens and MaxSnapshots must not be negative")
	}
	if err := o.Sampling.Validate(); err != nil {
		return nil, err
	}
	if o.Context <= 0 {
		o.Context = m.Config.MaxPositionEmbeddings
	}
	if o.MaxSnapshots == 0 {
		o.MaxSnapshots = DefaultSnapshots
	}
	if o.EOS == nil {
		o.EOS = m.Config.EOSTokenIDs
	}
	r, err := model.NewRunner(m, o.Backend, 1)
	if err != nil {
		return nil, err
	}
	c := &Conversation{m: m, o: o, r: r, system: o.System, msgs: slices.Clone(o.Messages), render: newRenderCache(o.Codec)}
	c.rw, _ = r.(model.Rewinder)
	return c, nil
}

// Close releases the runner.
func (c *Conversation) Close() error { return c.r.Close() }

// Reply is one turn's answer and how it was computed.
type Reply struct {
	// Text is the reply as decoded, without its EOS token; IDs are its
	// tokens, EOS included.
	Text string
	IDs  []int
	// StopReason is "eos", "max_new_tokens", "context" (the conversation
	// filled the context), "interrupted" (Stop) or "stopped" (OnToken).
	StopReason string
	// Prompt is the rendered conversation's ids the reply continues.
	Prompt []int
	// Reused prompt tokens came from the caches and Prefilled ones were
	// run this turn (Reused + Prefilled = len(Prompt)).
	Reused, Prefilled int
	// Resume is how the caches were reused: "extended" (the render starts
	// with the cached tokens), "restored" (from a saved state) or
	// "prefilled" (everything again); Note says the last two in a line.
	Resume, Note            string
	PrefillTime, DecodeTime time.Duration
	// Reasoning says the reply began inside a reasoning block: the
	// generation prompt opened one (Qwen3.5's "<think>\n").
	Reasoning bool
	budget    int
}

// budget is the most tokens a reply to a prompt of n tokens, of which
// prefill are run this turn, may have: the rest of the context, or
// MaxNewTokens, and what Check accepts.
func (c *Conversation) budget(prefill, n int) (int, error) {
	b := c.o.Context - n
	if c.o.MaxNewTokens > 0 {
		b = min(b, c.o.MaxNewTokens)
	}
	if b <= 0 {
		return 0, fmt.Errorf("the conversation's %d tokens fill the context of %d: /reset starts a new one", n, c.o.Context)
	}
	if c.o.Check == nil {
		return b, nil
	}
	err := c.o.Check(prefill, n+b)
	if err == nil || c.o.MaxNewTokens > 0 {
		return b, err
	}
	if c.o.Check(prefill, n+1) != nil {
		return 0, err
	}
	lo, hi := 1, b // Check accepts n+lo and refuses n+hi
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; c.o.Check(prefill, n+mid) == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// ErrInterrupted is Send's error when Stop ended the turn before its
// reply's first token: the message is not added, and the caches keep
// what was prefilled.
var ErrInterrupted = errors.New("interrupted before the reply began")

// Send adds a user message and generates the reply; stream, if set,
// receives the reply's text as it completes. On an error the message is
// not added.
func (c *Conversation) Send(user string, stream func(text string)) (*Reply, error) {
	msgs := append(slices.Clip(c.msgs), message("user", user))
	rep, err := c.turn(msgs, false, stream)
	if err != nil {
		return nil, err
	}
	c.msgs, c.turns = append(msgs, message("assistant", rep.Text)), c.turns+1
	return rep, nil
}

// turn renders msgs with the generation prompt, or continuing their final
// message (cont), and generates the reply to the render.
func (c *Conversation) turn(msgs []json.RawMessage, cont bool, stream func(text string)) (*Reply, error) {
	ids, rendered, err := c.encode(msgs, !cont, cont)
	if err != nil {
		return nil, err
	}
	boundary := 0 // the conversation before the reply's opening: the state there is worth saving
	history, _, err := c.encode(msgs, false, false)
	if cont { // before the message the reply continues, which the next render rewrites
		history, _, err = c.encode(msgs[:len(msgs)-1], false, false)
	}
	if err == nil {
		boundary = commonPrefix(history, ids)
	}
	budget, err := c.budget(len(ids)-c.reusable(ids), len(ids))
	if err != nil {
		return nil, err
	}
	rep := &Reply{Prompt: ids, budget: budget, Reasoning: OpensReasoning(rendered)}
	c.reasoning = rep.Reasoning
	start := time.Now()
	logits, err := c.prefill(ids, boundary, rep)
	if err != nil {
		c.forget()
		return nil, err
	}
	rep.PrefillTime = time.Since(start)
	if c.o.Stop != nil && c.o.Stop() {
		return nil, ErrInterrupted
	}
	start = time.Now()
	if err := c.reply(logits.Data, rep, stream); err != nil {
		c.forget()
		return nil, err
	}
	rep.DecodeTime = time.Since(start)
	return rep, nil
}

// reusable is how many of ids' tokens prefill will take from the caches:
// all the caches hold when ids extend them, else the latest saved state
// ids start with, else none.
func (c *Conversation) reusable(ids []int) int {
	same := commonPrefix(c.ids, ids)
	if same == len(c.ids) && same < len(ids) {
		return same
	}
	back := 0
	if c.rw != nil {
		for _, sn := range c.snaps {
			if sn.Pos() <= same && sn.Pos() < len(ids) {
				back = sn.Pos()
			}
		}
	}
	return back
}

// prefill brings the caches to ids and returns the last position's
// logits, saving the state at boundary on the way.
func (c *Conversation) prefill(ids []int, boundary int, rep *Reply) (*tensor.Tensor, error) {
	same := commonPrefix(c.ids, ids)
	rep.Resume = "extended"
	if same < len(c.ids) || same == len(ids) {
		var back *model.Snapshot
		for _, sn := range c.snaps {
			if sn.Pos() <= same && sn.Pos() < len(ids) {
				back = sn
			}
		}
		if back != nil && c.rw.Restore(back) == nil {
			rep.Resume = "restored"
			rep.Note = fmt.Sprintf("chat: the conversation's render departs from the cached tokens at token %d (an earlier turn renders, or encodes, differently now): resuming from the state saved at token %d, prefilling %d tokens",
				same, back.Pos(), len(ids)-back.Pos())
			c.ids = c.ids[:back.Pos()]
			c.snaps = slices.DeleteFunc(c.snaps, func(sn *model.Snapshot) bool { return sn.Pos() > back.Pos() })
		} else {
			if err := c.r.Reset(); err != nil {
				return nil, err
			}
			rep.Resume = "prefilled"
			why := "before any saved state"
			if c.rw == nil {
				why = "and backend " + c.r.Backend() + " cannot return to a saved state"
			}
			rep.Note = fmt.Sprintf("chat: the conversation's render departs from the cached tokens at token %d, %s: prefilling all %d tokens again", same, why, len(ids))
			c.ids, c.snaps = nil, nil
		}
	}
	rep.Reused, rep.Prefilled = len(c.ids), len(ids)-len(c.ids)
	if c.rw != nil && boundary > len(c.ids) && boundary < len(ids) {
		if _, err := c.feed(ids[len(c.ids):boundary], model.NoLogits); err != nil {
			return nil, err
		}
		sn, err := c.rw.Snapshot()
		if err != nil {
			return nil, err
		}
		if c.snaps = append(c.snaps, sn); len(c.snaps) > c.o.MaxSnapshots {
			c.snaps = c.snaps[1:]
		}
	}
	return c.feed(ids[len(c.ids):], model.LastLogits)
}

// feed runs ids on the caches.
func (c *Conversation) feed(ids []int, logits model.Logits) (*tensor.Tensor, error) {
	out, err := c.r.Forward([][]int{ids}, model.RunOptions{Logits: logits})
	if err != nil {
		return nil, err
	}
	c.ids = append(c.ids, ids...)
	return out, nil
}

// reply draws the reply's tokens, feeding all but the last to the caches.
func (c *Conversation) reply(logits []float32, rep *Reply, stream func(string)) error {
	sp, err := sampling.New(c.o.Sampling, len(logits), c.o.Seed+uint64(c.turns))
	if err != nil {
		return err
	}
	if err := sp.Observe(rep.Prompt...); err != nil {
		return err
	}
	text := &TextStream{Codec: c.o.Codec}
	say := func(s string) {
		if stream != nil && s != "" {
			stream(s)
		}
	}
	rep.StopReason = "max_new_tokens"
	if c.o.MaxNewTokens == 0 {
		rep.StopReason = "context"
	}
	out := &tensor.Tensor{Data: logits, Shape: []int{1, 1, len(logits)}}
	for {
		id, err := sp.Next(out.Data)
		if err != nil {
			return err
		}
		rep.IDs = append(rep.IDs, id)
		eos := slices.Contains(c.o.EOS, id)
		if !eos {
			say(text.Add(id))
		}
		if c.o.OnToken != nil && !c.o.OnToken(id, out.Data) {
			rep.StopReason = "stopped"
			break
		}
		if eos {
			rep.StopReason = "eos"
			break
		}
		if len(rep.IDs) >= rep.budget {
			break
		}
		if c.o.Stop != nil && c.o.Stop() {
			rep.StopReason = "interrupted"
			break
		}
		if out, err = c.r.Forward([][]int{{id}}, model.RunOptions{Logits: model.LastLogits, Out: out}); err != nil {
			return err
		}
		c.ids = append(c.ids, id)
	}
	say(text.Flush())
	rep.Text = text.Text()
	return nil
}

// forget drops the caches after a failed turn, whose state is unknown.
func (c *Conversation) forget() {
	_ = c.r.Reset()
	c.ids, c.snaps = nil, nil
}

// encode renders the conversation and encodes it.
func (c *Conversation) encode(msgs []json.RawMessage, generationPrompt, cont bool) ([]int, string, error) {
	text, err := c.renderTurn(msgs, generationPrompt, cont)
	if err != nil {
		return nil, "", err
	}
	ids, err := c.render.encode(c.o.Codec, text)
	return ids, text, err
}

// Render renders msgs (the conversation's own when nil) after the system
// message, with the template's variables and the thinking switch.
func (c *Conversation) Render(msgs []json.RawMessage, generationPrompt bool) (string, error) {
	return c.renderTurn(msgs, generationPrompt, false)
}

// renderTurn is Render, or with cont the render that continues the final
// message (continue_final_message).
func (c *Conversation) renderTurn(msgs []json.RawMessage, generationPrompt, cont bool) (string, error) {
	if msgs == nil {
		msgs = c.msgs
	}
	if c.system != "" {
		msgs = append([]json.RawMessage{message("system", c.system)}, msgs...)
	}
	all, err := json.Marshal(append([]json.RawMessage{}, msgs...))
	if err != nil {
		return "", err
	}
	vars := maps.Clone(c.o.Vars)
	if c.thinking != nil {
		if vars == nil {
			vars = map[string]any{}
		}
		vars["enable_thinking"] = *c.thinking
	}
	return c.o.Template.Render(chat.Input{Messages: all, Tools: c.o.Tools, AddGenerationPrompt: generationPrompt, ContinueFinalMessage: cont, Vars: vars})
}

// IDs are the token ids the caches hold.
func (c *Conversation) IDs() []int { return slices.Clone(c.ids) }

// Reset starts a new conversation; the system message stays.
func (c *Conversation) Reset() error {
	c.msgs, c.turns = nil, 0
	c.forget()
	return nil
}

// SetSystem sets the system message ("": none); the turns stay.
func (c *Conversation) SetSystem(s string) { c.system = s }

// SetThinking sets the template's enable_thinking, or fails when the
// template has no such switch.
func (c *Conversation) SetThinking(on bool) error {
	if !c.o.Template.UsesThinking() {
		return fmt.Errorf("%s has no enable_thinking switch", c.o.Template.Origin)
	}
	c.thinking = &on
	return nil
}

// ChatCommands lists what Line understands.
const ChatCommands = `/reset          start a new conversation (the system message stays)
/system TEXT    set the system message (no TEXT: none)
/think          turn the template's thinking on (enable_thinking)
/no-think       turn it off
/exit           end the chat (so does end of input)
/help           this list
A line starting with // sends the rest, starting with /.`

// LineResult is what one typed line did.
type LineResult struct {
	Exit  bool
	Note  string // for the user, when a command ran
	Reply *Reply // when the line was a message
}

// Line handles one typed line: a command of ChatCommands or a message
// (Send). An empty line does nothing.
func (c *Conversation) Line(line string, stream func(text string)) (LineResult, error) {
	line = strings.TrimRight(line, "\r\n")
	if strings.TrimSpace(line) == "" {
		return LineResult{}, nil
	}
	if strings.HasPrefix(line, "//") {
		line = line[1:]
	} else if strings.HasPrefix(line, "/") {
		cmd, arg, _ := strings.Cut(line, " ")
		switch cmd {
		case "/exit", "/quit":
			return LineResult{Exit: true}, nil
		case "/reset":
			return LineResult{Note: "chat: a new conversation"}, c.Reset()
		case "/system":
			c.SetSystem(strings.TrimSpace(arg))
			if c.system == "" {
				return LineResult{Note: "chat: no system message"}, nil
			}
			return LineResult{Note: "chat: system message set"}, nil
		case "/think", "/no-think":
			if err := c.SetThinking(cmd == "/think"); err != nil {
				return LineResult{Note: "chat: " + err.Error()}, nil
			}
			return LineResult{Note: "chat: thinking " + map[bool]string{true: "on", false: "off"}[cmd == "/think"]}, nil
		case "/help":
			return LineResult{Note: ChatCommands}, nil
		default:
			return LineResult{Note: fmt.Sprintf("chat: unknown command %s; /help lists them", cmd)}, nil
		}
	}
	rep, err := c.Send(line, stream)
	return LineResult{Reply: rep}, err
}

func message(role, content string) json.RawMessage {
	b, _ := json.Marshal(chat.Message{Role: role, Content: content})
	return b
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// String is the turn's speed in one line, as GenerateResult's, with the
// prompt tokens the caches kept.
func (r *Reply) String() string {
	g := &GenerateResult{NewIDs: r.IDs, StopReason: r.StopReason, PrefillTokens: r.Prefilled, PrefillTime: r.PrefillTime, DecodeTime: r.DecodeTime}
	return fmt.Sprintf("%d prompt tokens, %d kept · %s", len(r.Prompt), r.Reused, g)
}

// firstError keeps a writer's first error.
type firstError struct {
	w   io.Writer
	err error
}

func (f *firstError) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.w.Write(p)
	f.err = err
	return n, err
}
