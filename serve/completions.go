package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/qwenref/qwenref/generate"
)

type completionRequest struct {
	params
	Prompt   json.RawMessage `json:"prompt"`
	Echo     bool            `json:"echo"`
	Logprobs *int            `json:"logprobs"`
	BestOf   *int            `json:"best_of"`
	Suffix   *string         `json:"suffix"`
}

// parsePrompts reads prompt as OpenAI's API takes it: a string, an array
// of strings, an array of token ids, or an array of such arrays.
func (s *Server) parsePrompts(raw json.RawMessage) ([][]int, *apiError) {
	bad := apiErr(http.StatusBadRequest, "prompt", "invalid_type", "prompt: want a string, an array of strings, an array of token ids or an array of such arrays")
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badParam("prompt", "prompt is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		ids, e := s.encode(text)
		return [][]int{ids}, e
	}
	if raw[0] != '[' {
		return nil, bad
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, bad
	}
	if len(items) == 0 {
		return nil, badParam("prompt", "prompt is an empty array")
	}
	if b := bytes.TrimSpace(items[0]); len(b) > 0 && (b[0] >= '0' && b[0] <= '9' || b[0] == '-') {
		ids, err := generate.ParseIDs(raw)
		if err != nil {
			return nil, badParam("prompt", "prompt's token ids: %v", err)
		}
		return ids, nil
	}
	if len(items) > MaxPrompts {
		return nil, badParam("prompt", "prompt has %d prompts, over the limit of %d per request", len(items), MaxPrompts)
	}
	var out [][]int
	for _, it := range items {
		var t string
		if json.Unmarshal(it, &t) == nil {
			ids, e := s.encode(t)
			if e != nil {
				return nil, e
			}
			out = append(out, ids)
			continue
		}
		rows, err := generate.ParseIDs(it)
		if err != nil || len(rows) != 1 {
			return nil, bad
		}
		out = append(out, rows[0])
	}
	return out, nil
}

// encode tokenizes a prompt, bounded in bytes by the body limit already.
func (s *Server) encode(text string) ([]int, *apiError) {
	ids, err := s.o.Codec.Encode(text)
	if err != nil {
		return nil, badParam("prompt", "encoding the prompt: %v", err)
	}
	return ids, nil
}

func (s *Server) completions(ctx context.Context, w http.ResponseWriter, body []byte) *apiError {
	var req completionRequest
	if e := decodeStrict(body, &req); e != nil {
		return e
	}
	g, stops, e := s.check(&req.params)
	if e != nil {
		return e
	}
	switch {
	case req.BestOf != nil && *req.BestOf != 1:
		return badParam("best_of", "best_of must be 1")
	case req.Suffix != nil && *req.Suffix != "":
		return badParam("suffix", "suffix is not supported")
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > MaxTopLogprobs):
		return badParam("logprobs", "logprobs must be in [0, %d], got %d", MaxTopLogprobs, *req.Logprobs)
	case req.Stream && (req.Logprobs != nil || req.Echo):
		return badParam("stream", "streaming with logprobs or echo is not supported: ask without stream")
	}
	prompts, e := s.parsePrompts(req.Prompt)
	if e != nil {
		return e
	}
	if len(prompts) > MaxPrompts {
		return badParam("prompt", "prompt has %d prompts, over the limit of %d per request", len(prompts), MaxPrompts)
	}
	maxTokens := CompletionDefaultTokens
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	topN := -1
	if req.Logprobs != nil {
		topN = *req.Logprobs
	}
	id, created := newID("cmpl-"), time.Now().Unix()
	var sse *eventStream
	if req.Stream {
		sse = &eventStream{w: w}
	}
	var choices []any
	usage := map[string]int{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
	for i, prompt := range prompts {
		sp := runSpec{prompt: prompt, maxTokens: maxTokens, g: g, stops: stops, topN: topN, echo: req.Echo}
		if sse != nil {
			sp.emit = func(text string) error {
				return sse.send(map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.o.Name,
					"choices": []any{map[string]any{"index": i, "text": text, "logprobs": nil, "finish_reason": nil}}})
			}
		}
		res, e := s.run(ctx, sp)
		if e != nil {
			return sse.fail(e)
		}
		usage["prompt_tokens"] += len(prompt)
		usage["completion_tokens"] += len(res.ids)
		if sse != nil {
			if err := sse.send(map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.o.Name,
				"choices": []any{map[string]any{"index": i, "text": "", "logprobs": nil, "finish_reason": res.finish}}}); err != nil {
				return nil
			}
			continue
		}
		text := res.text
		var lp any
		if topN >= 0 {
			var entries []tokenLP
			if req.Echo {
				entries = res.promptLP
			}
			lp = s.completionLogprobs(append(entries, res.genLP...))
		}
		if req.Echo {
			pt, _ := s.o.Codec.Decode(prompt)
			text = pt + text
		}
		choices = append(choices, map[string]any{"index": i, "text": text, "logprobs": lp, "finish_reason": res.finish})
	}
	usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
	if sse != nil {
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			_ = sse.send(map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.o.Name, "choices": []any{}, "usage": usage})
		}
		sse.done()
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.o.Name,
		"choices": choices, "usage": usage})
	return nil
}

// completionLogprobs is the legacy logprobs object: tokens, their
// logprobs, the top alternatives as {token: logprob} (the chosen token
// among them) and each token's offset in the text.
func (s *Server) completionLogprobs(entries []tokenLP) map[string]any {
	tokens := make([]string, len(entries))
	lps := make([]any, len(entries))
	tops := make([]any, len(entries))
	offsets := make([]int, len(entries))
	off := 0
	for i, e := range entries {
		tokens[i] = s.tokenText(e.ID)
		offsets[i] = off
		off += len(tokens[i])
		if !e.Valid {
			continue
		}
		lps[i] = e.LP
		top := map[string]float64{tokens[i]: e.LP}
		for _, a := range e.Top {
			top[s.tokenText(a.ID)] = a.LP
		}
		tops[i] = top
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
}

// tokenText is one token decoded alone.
func (s *Server) tokenText(id int) string {
	t, err := s.o.Codec.Decode([]int{id})
	if err != nil {
		return ""
	}
	return t
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
