package serve

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/qwenref/qwenref/generate"
)

// params are the sampling and length fields both endpoints take, OpenAI's
// and the ones vLLM adds (top_k, min_p, repetition_penalty).
type params struct {
	Model             string           `json:"model"`
	MaxTokens         *int             `json:"max_tokens"`
	Temperature       *float64         `json:"temperature"`
	TopP              *float64         `json:"top_p"`
	TopK              *int             `json:"top_k"`
	MinP              *float64         `json:"min_p"`
	RepetitionPenalty *float64         `json:"repetition_penalty"`
	Seed              *int64           `json:"seed"`
	Stop              json.RawMessage  `json:"stop"`
	Stream            bool             `json:"stream"`
	StreamOptions     *streamOptions   `json:"stream_options"`
	N                 *int             `json:"n"`
	PresencePenalty   *float64         `json:"presence_penalty"`
	FrequencyPenalty  *float64         `json:"frequency_penalty"`
	LogitBias         map[string]int64 `json:"logit_bias"`
	User              string           `json:"user"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// check refuses what the server does not do, naming the parameter, and
// returns the sampling settings and stop strings.
func (s *Server) check(p *params) (generate.GenerationSettings, []string, *apiError) {
	var g generate.GenerationSettings
	if p.Model != "" && p.Model != s.o.Name {
		return g, nil, modelNotFound(p.Model)
	}
	switch {
	case p.N != nil && *p.N != 1:
		return g, nil, badParam("n", "n must be 1: this server returns one choice per prompt")
	case p.PresencePenalty != nil && *p.PresencePenalty != 0:
		return g, nil, badParam("presence_penalty", "presence_penalty is not supported (use repetition_penalty)")
	case p.FrequencyPenalty != nil && *p.FrequencyPenalty != 0:
		return g, nil, badParam("frequency_penalty", "frequency_penalty is not supported (use repetition_penalty)")
	case len(p.LogitBias) > 0:
		return g, nil, badParam("logit_bias", "logit_bias is not supported")
	case p.MaxTokens != nil && (*p.MaxTokens < 0 || *p.MaxTokens > s.o.MaxTokens):
		return g, nil, badParam("max_tokens", "max_tokens must be in [0, %d] (the server's --max-tokens), got %d", s.o.MaxTokens, *p.MaxTokens)
	case p.StreamOptions != nil && !p.Stream:
		return g, nil, badParam("stream_options", "stream_options needs stream: true")
	}
	o := generate.SamplingOverrides{Temperature: p.Temperature, TopP: p.TopP, MinP: p.MinP, RepetitionPenalty: p.RepetitionPenalty}
	if p.TopK != nil {
		k := *p.TopK
		if k == -1 { // vLLM's "off"
			k = 0
		}
		o.TopK = &k
	}
	if err := o.Validate(); err != nil {
		return g, nil, badParam(paramOf(err.Error()), "%v", err)
	}
	if p.Seed != nil {
		o.Seed = uint64(*p.Seed)
	} else {
		o.Seed = rand.Uint64()
	}
	g, err := s.o.Settings(o)
	if err != nil {
		return g, nil, apiErr(http.StatusInternalServerError, "", "", "the checkpoint's sampling settings: %v", err)
	}
	stops, e := parseStop(p.Stop)
	return g, stops, e
}

// paramOf names the request parameter a Validate message is about.
func paramOf(msg string) string {
	for _, p := range [][2]string{{"temperature", "temperature"}, {"top-k", "top_k"}, {"top-p", "top_p"}, {"min-p", "min_p"}, {"repetition penalty", "repetition_penalty"}} {
		if strings.HasPrefix(msg, p[0]) {
			return p[1]
		}
	}
	return ""
}

// parseStop reads stop: null, a string or an array of strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	var list []string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, apiErr(http.StatusBadRequest, "stop", "invalid_type", "stop: want a string or an array of strings")
	}
	if len(list) > MaxStops {
		return nil, badParam("stop", "stop has %d strings, over the limit of %d", len(list), MaxStops)
	}
	var out []string
	for _, s := range list {
		if len(s) > MaxStopBytes {
			return nil, badParam("stop", "a stop string is %d bytes, over the limit of %d", len(s), MaxStopBytes)
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// runSpec is one generation.
type runSpec struct {
	prompt    []int
	maxTokens int // 0: score the prompt only
	g         generate.GenerationSettings
	stops     []string
	topN      int  // logprobs with topN alternatives; -1: none
	echo      bool // the prompt's logprobs too
	// emit, if set, receives the text as it becomes final (streaming).
	emit func(text string) error
}

// runResult is what a generation produced.
type runResult struct {
	text     string
	ids      []int  // generated, EOS included
	finish   string // "stop" or "length"
	genLP    []tokenLP
	promptLP []tokenLP // with echo and logprobs: one per prompt token, the first without a value
}

// run generates for one prompt on a runner of its own, waiting for its
// turn at the model first; ctx ending stops it between tokens.
func (s *Server) run(ctx context.Context, sp runSpec) (*runResult, *apiError) {
	m := s.o.Model
	if len(sp.prompt) == 0 {
		return nil, badParam("prompt", "the prompt is empty: at least one token is needed")
	}
	if err := m.CheckIDs(sp.prompt); err != nil {
		return nil, badParam("prompt", "%v", err)
	}
	units := 1
	if s.o.Check != nil {
		rows := 1
		if sp.echo {
			rows = len(sp.prompt)
		}
		tokens := len(sp.prompt) + max(sp.maxTokens, 1)
		if err := s.o.Check(1, len(sp.prompt), tokens, rows); err != nil {
			return nil, apiErr(http.StatusBadRequest, "prompt", "context_length_exceeded", "the prompt (%d tokens) plus max_tokens (%d): %v", len(sp.prompt), sp.maxTokens, err)
		}
		// It fits alone; if Parallel runs of its size would not, it runs
		// alone: it waits for the model to be free, and the runs behind it
		// wait for it.
		if s.o.Parallel > 1 && s.o.Check(s.o.Parallel, len(sp.prompt), tokens, rows) != nil {
			units = s.o.Parallel
		}
	}
	release, e := s.acquire(ctx, units)
	if e != nil {
		return nil, e
	}
	defer release()

	res := &runResult{finish: "length"}
	stream := generate.TextStream{Codec: s.o.Codec}
	eos := m.Config.EOSTokenIDs
	longest := 0
	for _, st := range sp.stops {
		longest = max(longest, len(st))
	}
	var text strings.Builder
	sent, stopped, emitErr := 0, false, error(nil)
	// flush emits the text that no stop string can still claim.
	flush := func(final bool) {
		if sp.emit == nil || emitErr != nil {
			return
		}
		t := text.String()
		safe := len(t)
		if !final && longest > 1 {
			safe = max(sent, len(t)-(longest-1))
			for safe > sent && !utf8.RuneStart(t[safe]) {
				safe--
			}
		}
		if safe > sent {
			emitErr = sp.emit(t[sent:safe])
			sent = safe
		}
	}
	// add appends text, cutting it at the first stop string.
	add := func(piece string) {
		from := max(0, text.Len()-longest+1)
		text.WriteString(piece)
		if i := firstStop(text.String(), from, sp.stops); i >= 0 {
			t := text.String()[:i]
			text.Reset()
			text.WriteString(t)
			stopped, res.finish = true, "stop"
		}
	}
	opt := generate.GenerateOptions{MaxNewTokens: max(sp.maxTokens, 1), Sampling: sp.g.Config, Seed: sp.g.Seed, EOS: eos}
	if sp.echo && sp.topN >= 0 {
		opt.PromptLogits = func(l []float32) { res.promptLP = promptLogprobs(l, sp.prompt, m.Config.VocabSize, sp.topN) }
	}
	opt.OnToken = func(id int, logits []float32) bool {
		if ctx.Err() != nil || sp.maxTokens == 0 {
			return false
		}
		res.ids = append(res.ids, id)
		s.generated.Add(1)
		if s.onToken != nil {
			s.onToken(len(res.ids))
		}
		if sp.topN >= 0 {
			res.genLP = append(res.genLP, logprobOf(logits, id, sp.topN))
		}
		if slices.Contains(eos, id) {
			res.finish = "stop"
			return true
		}
		if add(stream.Add(id)); stopped {
			return false
		}
		flush(false)
		return emitErr == nil
	}
	if _, err := generate.Generate(m, sp.prompt, s.o.Backend, opt); err != nil {
		return nil, apiErr(http.StatusInternalServerError, "", "", "generation failed: %v", err)
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx)
	}
	if !stopped {
		add(stream.Flush())
	}
	flush(true)
	if emitErr != nil {
		return nil, &apiError{Status: 499, Message: emitErr.Error()}
	}
	res.text = text.String()
	return res, nil
}

// firstStop is the index of the earliest stop string in t that ends after
// from, or −1.
func firstStop(t string, from int, stops []string) int {
	best := -1
	for _, st := range stops {
		if i := strings.Index(t[from:], st); i >= 0 && (best < 0 || from+i < best) {
			best = from + i
		}
	}
	return best
}

// tokenLP is a token's log-probability and its most likely alternatives.
type tokenLP struct {
	ID    int
	LP    float64
	Valid bool // false for a prompt's first token, which has no context
	Top   []altLP
}

type altLP struct {
	ID int
	LP float64
}

// logprobOf is id's log-softmax under logits, computed as
// generate.TokenNLL computes the NLL (so a prompt's logprobs are −NLL of
// qwenref perplexity bit for bit), with the topN most likely tokens.
func logprobOf(logits []float32, id, topN int) tokenLP {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := math.Log(sum)
	lp := func(i int) float64 { return -((mx - float64(logits[i])) + lse) }
	out := tokenLP{ID: id, LP: lp(id), Valid: true}
	if topN > 0 {
		top := make([]int, 0, topN+1)
		for i, v := range logits {
			if len(top) == topN && v <= logits[top[topN-1]] {
				continue
			}
			j := len(top)
			if j < topN {
				top = append(top, i)
			} else {
				j--
			}
			for ; j > 0 && logits[top[j-1]] < v; j-- {
				top[j] = top[j-1]
			}
			top[j] = i
		}
		for _, i := range top {
			out.Top = append(out.Top, altLP{i, lp(i)})
		}
	}
	return out
}

// promptLogprobs scores each prompt token after the first from the logits
// of the position before it, [len(prompt), V].
func promptLogprobs(logits []float32, prompt []int, v, topN int) []tokenLP {
	out := make([]tokenLP, len(prompt))
	out[0] = tokenLP{ID: prompt[0]}
	for j := 1; j < len(prompt); j++ {
		out[j] = logprobOf(logits[(j-1)*v:j*v], prompt[j], topN)
	}
	return out
}
