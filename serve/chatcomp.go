package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/qwenref/qwenref/chat"
)

type chatRequest struct {
	params
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

// prepare checks a chat request and renders its prompt.
func (s *Server) prepareChat(ctx context.Context, req *chatRequest) (string, *apiError) {
	if req.MaxCompletionTokens != nil {
		if req.MaxTokens != nil && *req.MaxTokens != *req.MaxCompletionTokens {
			return "", badParam("max_completion_tokens", "max_tokens and max_completion_tokens differ: give one")
		}
		req.MaxTokens = req.MaxCompletionTokens
	}
	if s.o.Template == nil {
		return "", apiErr(http.StatusBadRequest, "messages", "", "this server has no chat template: use /v1/completions")
	}
	var msgs []struct {
		Role *string `json:"role"`
	}
	if len(req.Messages) == 0 {
		return "", badParam("messages", "messages is required")
	}
	if err := json.Unmarshal(req.Messages, &msgs); err != nil {
		return "", apiErr(http.StatusBadRequest, "messages", "invalid_type", "messages: want an array of message objects: %v", err)
	}
	if len(msgs) == 0 {
		return "", badParam("messages", "messages is empty")
	}
	for i, m := range msgs {
		if m.Role == nil {
			return "", badParam("messages", "messages[%d] has no role", i)
		}
	}
	tools := req.Tools
	var choice string
	if len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		if json.Unmarshal(req.ToolChoice, &choice) != nil || choice != "auto" && choice != "none" {
			return "", badParam("tool_choice", `tool_choice must be "auto" or "none": this server does not force a tool call`)
		}
	}
	if choice == "none" || string(tools) == "null" {
		tools = nil
	}
	if len(tools) > 0 {
		var list []json.RawMessage
		if json.Unmarshal(tools, &list) != nil {
			return "", apiErr(http.StatusBadRequest, "tools", "invalid_type", "tools: want an array of tool objects")
		}
		if len(list) == 0 {
			tools = nil
		}
	}
	if req.ResponseFormat != nil && req.ResponseFormat.Type != "text" {
		return "", badParam("response_format", "response_format %q is not supported (only text)", req.ResponseFormat.Type)
	}
	vars := map[string]any{}
	gen := true
	if len(req.ChatTemplateKwargs) > 0 && string(req.ChatTemplateKwargs) != "null" {
		v, g, err := chat.ParseVars(req.ChatTemplateKwargs)
		if err != nil {
			return "", badParam("chat_template_kwargs", "chat_template_kwargs: %v", err)
		}
		if vars = v; g != nil {
			gen = *g
		}
	}
	text, err := s.o.Template.RenderContext(ctx, chat.Input{Messages: req.Messages, Tools: tools, AddGenerationPrompt: gen, Vars: vars})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctxError(ctx)
		}
		return "", badParam("messages", "the chat template refused the conversation: %v", err)
	}
	return text, nil
}

func (s *Server) chatCompletions(ctx context.Context, w http.ResponseWriter, body []byte) *apiError {
	var req chatRequest
	if e := decodeStrict(body, &req); e != nil {
		return e
	}
	prompt, e := s.prepareChat(ctx, &req)
	if e != nil {
		return e
	}
	g, stops, e := s.check(&req.params)
	if e != nil {
		return e
	}
	topN := -1
	if req.Logprobs {
		topN = 0
		if req.TopLogprobs != nil {
			if *req.TopLogprobs < 0 || *req.TopLogprobs > MaxTopLogprobs {
				return badParam("top_logprobs", "top_logprobs must be in [0, %d], got %d", MaxTopLogprobs, *req.TopLogprobs)
			}
			topN = *req.TopLogprobs
		}
	} else if req.TopLogprobs != nil {
		return badParam("top_logprobs", "top_logprobs needs logprobs: true")
	}
	if req.Stream && req.Logprobs {
		return badParam("stream", "streaming with logprobs is not supported: ask without stream")
	}
	ids, e := s.encode(prompt)
	if e != nil {
		return e
	}
	maxTokens := s.o.MaxTokens
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	toolsOn := len(req.Tools) > 0 && string(req.Tools) != "null" && string(req.ToolChoice) != `"none"`
	sp := splitter{think: openThink(prompt), tools: toolsOn}
	id, created := newID("chatcmpl-"), time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": s.o.Name,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	var sse *eventStream
	run := runSpec{prompt: ids, maxTokens: maxTokens, g: g, stops: stops, topN: topN}
	if req.Stream {
		sse = &eventStream{w: w}
		var raw strings.Builder
		sentR, sentC := 0, 0
		run.emit = func(text string) error {
			if !sse.started {
				if err := sse.send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
					return err
				}
			}
			raw.WriteString(text)
			r, c, _ := sp.split(raw.String(), false)
			delta := map[string]any{}
			if len(r) > sentR {
				delta["reasoning_content"] = r[sentR:]
			}
			if len(c) > sentC {
				delta["content"] = c[sentC:]
			}
			sentR, sentC = len(r), len(c)
			if len(delta) == 0 {
				return nil
			}
			return sse.send(chunk(delta, nil))
		}
		res, e := s.run(ctx, run)
		if e != nil {
			return sse.fail(e)
		}
		r, c, calls := sp.split(res.text, true)
		delta := map[string]any{}
		if !sse.started {
			delta["role"] = "assistant"
		}
		if len(r) > sentR {
			delta["reasoning_content"] = r[sentR:]
		}
		if len(c) > sentC {
			delta["content"] = c[sentC:]
		}
		finish := res.finish
		if tc := parseToolCalls(calls); len(tc) > 0 {
			for i, t := range tc {
				t["index"] = i
			}
			delta["tool_calls"] = tc
			finish = "tool_calls"
		} else if calls != "" { // not a tool call after all: it is content
			delta["content"] = c[min(sentC, len(c)):] + calls
		}
		if len(delta) > 0 {
			_ = sse.send(chunk(delta, nil))
		}
		_ = sse.send(chunk(map[string]any{}, finish))
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			_ = sse.send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": s.o.Name,
				"choices": []any{}, "usage": usageOf(len(ids), len(res.ids))})
		}
		sse.done()
		return nil
	}
	res, e := s.run(ctx, run)
	if e != nil {
		return e
	}
	r, c, calls := sp.split(res.text, true)
	msg := map[string]any{"role": "assistant", "content": c}
	if r != "" || sp.think {
		msg["reasoning_content"] = r
	}
	finish := res.finish
	if tc := parseToolCalls(calls); len(tc) > 0 {
		msg["tool_calls"] = tc
		finish = "tool_calls"
		if c = strings.TrimSpace(c); c == "" {
			msg["content"] = nil
		} else {
			msg["content"] = c
		}
	} else if calls != "" {
		msg["content"] = c + calls
	}
	var lp any
	if topN >= 0 {
		lp = map[string]any{"content": s.chatLogprobs(res.genLP)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": s.o.Name,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": lp, "finish_reason": finish}},
		"usage":   usageOf(len(ids), len(res.ids))})
	return nil
}

func usageOf(prompt, completion int) map[string]int {
	return map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
}

// chatLogprobs is the chat logprobs' content list.
func (s *Server) chatLogprobs(entries []tokenLP) []any {
	out := make([]any, 0, len(entries))
	item := func(id int, lp float64) map[string]any {
		t := s.tokenText(id)
		b := make([]int, len(t))
		for i := range len(t) {
			b[i] = int(t[i])
		}
		return map[string]any{"token": t, "logprob": lp, "bytes": b}
	}
	for _, e := range entries {
		it := item(e.ID, e.LP)
		top := make([]any, 0, len(e.Top))
		for _, a := range e.Top {
			top = append(top, item(a.ID, a.LP))
		}
		it["top_logprobs"] = top
		out = append(out, it)
	}
	return out
}

// openThink reports whether the rendered prompt leaves a <think> block
// open (Qwen3's generation prompt with thinking on), so that the reply
// starts with its reasoning.
func openThink(prompt string) bool {
	return strings.LastIndex(prompt, thinkOpen) > strings.LastIndex(prompt, thinkClose)
}

const (
	thinkOpen, thinkClose = "<think>", "</think>"
	callOpen, callClose   = "<tool_call>", "</tool_call>"
)

// splitter parts a reply into its reasoning (up to </think>), its content
// and the tool calls from the first <tool_call> on, as vLLM's and SGLang's
// Qwen3 parsers do.
type splitter struct {
	think, tools bool
}

// split parts text; unless final it holds back a tail that may be the
// start of a tag, so that what it returns only grows.
func (sp splitter) split(text string, final bool) (reasoning, content, calls string) {
	t, think := text, sp.think
	if !think {
		trimmed := strings.TrimLeft(t, " \n")
		switch {
		case strings.HasPrefix(trimmed, thinkOpen):
			think, t = true, trimmed[len(thinkOpen):]
		case !final && strings.HasPrefix(thinkOpen, trimmed):
			return "", "", ""
		}
	}
	if think {
		i := strings.Index(t, thinkClose)
		if i < 0 {
			return holdback(t, thinkClose, final), "", ""
		}
		reasoning, t = t[:i], strings.TrimLeft(t[i+len(thinkClose):], "\n")
	}
	if !sp.tools {
		return reasoning, t, ""
	}
	if i := strings.Index(t, callOpen); i >= 0 {
		return reasoning, t[:i], t[i:]
	}
	return reasoning, holdback(t, callOpen, final), ""
}

// holdback drops a tail of s that is a proper prefix of mark.
func holdback(s, mark string, final bool) string {
	if final {
		return s
	}
	for k := min(len(mark)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, mark[:k]) {
			return s[:len(s)-k]
		}
	}
	return s
}

// parseToolCalls reads Qwen's <tool_call>{"name", "arguments"}</tool_call>
// blocks; nil when any of them is not such JSON (the text stays content).
func parseToolCalls(text string) []map[string]any {
	var out []map[string]any
	for rest := text; strings.TrimSpace(rest) != ""; {
		body, ok := strings.CutPrefix(strings.TrimSpace(rest), callOpen)
		if !ok {
			return nil
		}
		inner, after, _ := strings.Cut(body, callClose)
		rest = after
		var call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(inner)), &call); err != nil || call.Name == "" {
			return nil
		}
		args := string(call.Arguments)
		if args == "" {
			args = "{}"
		}
		out = append(out, map[string]any{"id": newID("call_"), "type": "function",
			"function": map[string]any{"name": call.Name, "arguments": args}})
	}
	return out
}
