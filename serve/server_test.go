package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

// thinkTemplate is ChatML with Qwen3's thinking switch and tools, enough
// to exercise the reasoning split and the tools' rendering.
const thinkTemplate = `{%- if tools %}<|im_start|>system
# Tools
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% else %}<think>
{% endif %}{% endif %}`

var (
	demoOnce sync.Once
	demoM    *model.Model
	demoTok  generate.TextCodec
	demoErr  error
)

func demo(t *testing.T) (*model.Model, generate.TextCodec, *model.Backend) {
	demoOnce.Do(func() {
		m, tok, err := bundled.Model()
		demoM, demoTok, demoErr = m, tok, err
	})
	require.NoError(t, demoErr)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	return demoM, demoTok, be
}

func newTestServer(t *testing.T, edit func(*Options)) (*Server, *httptest.Server) {
	m, tok, be := demo(t)
	o := Options{Model: m, Backend: be, Codec: tok, Template: chat.MustParse(thinkTemplate, "test"), Name: "demo",
		Settings: func(o generate.SamplingOverrides) (generate.GenerationSettings, error) {
			return generate.LoadGenerationSettings("", o)
		}}
	if edit != nil {
		edit(&o)
	}
	s, err := New(o)
	require.NoError(t, err)
	ts := httptest.NewServer(s) // binds 127.0.0.1, an ephemeral port
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, ts *httptest.Server, path, body string, header ...string) (int, map[string]any) {
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &out), "%s", data)
	return resp.StatusCode, out
}

// The prompt's logprobs of echo (lm-evaluation-harness's loglikelihood
// request) are −NLL of generate.Perplexity bit for bit, the first token
// has none, and the top alternatives hold the chosen token.
func TestEchoLogprobsEqualPerplexity(t *testing.T) {
	for _, spec := range []string{"chunked", "naive"} {
		t.Run(spec, func(t *testing.T) {
			m, _, _ := demo(t)
			be, err := model.ParseBackend(spec)
			require.NoError(t, err)
			_, ts := newTestServer(t, func(o *Options) { o.Backend = be })
			ids := []int{785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13}
			want, err := generate.Perplexity(m, ids, be, len(ids), len(ids), nil)
			require.NoError(t, err)
			idsJSON, _ := json.Marshal(ids)
			for _, maxTokens := range []int{0, 1} {
				code, out := post(t, ts, "/v1/completions", fmt.Sprintf(`{"model":"demo","prompt":%s,"echo":true,"max_tokens":%d,"logprobs":3,"temperature":0}`, idsJSON, maxTokens))
				require.Equal(t, http.StatusOK, code, out)
				choice := out["choices"].([]any)[0].(map[string]any)
				lp := choice["logprobs"].(map[string]any)
				got := lp["token_logprobs"].([]any)
				require.Len(t, got, len(ids)+maxTokens)
				assert.Nil(t, got[0])
				tops := lp["top_logprobs"].([]any)
				for j := 1; j < len(ids); j++ {
					assert.Equal(t, -want.NLL[j], got[j].(float64), "token %d", j)
					top := tops[j].(map[string]any)
					assert.GreaterOrEqual(t, len(top), 3)
					assert.Contains(t, top, lp["tokens"].([]any)[j].(string))
				}
			}
		})
	}
}

// The generated tokens' logprobs come from the logits they were drawn
// from: greedy, the chosen token is the most likely one.
func TestGeneratedLogprobsGreedy(t *testing.T) {
	_, ts := newTestServer(t, nil)
	code, out := post(t, ts, "/v1/completions", `{"prompt":"Hello there","max_tokens":4,"logprobs":2,"temperature":0}`)
	require.Equal(t, http.StatusOK, code, out)
	lp := out["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
	for i, v := range lp["token_logprobs"].([]any) {
		best := -1e300
		for _, x := range lp["top_logprobs"].([]any)[i].(map[string]any) {
			best = max(best, x.(float64))
		}
		assert.Equal(t, best, v.(float64), "token %d", i)
	}
	assert.Equal(t, 4.0, out["usage"].(map[string]any)["completion_tokens"])
}

// A stop string cuts the text before it and ends generation.
func TestStopString(t *testing.T) {
	_, ts := newTestServer(t, nil)
	code, out := post(t, ts, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"temperature":0}`)
	require.Equal(t, http.StatusOK, code, out)
	full := out["choices"].([]any)[0].(map[string]any)["text"].(string)
	require.Greater(t, len(full), 6, "the greedy text is too short to cut")
	stop := full[len(full)/2 : len(full)/2+2]
	body, _ := json.Marshal(map[string]any{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "stop": []string{stop}})
	code, out = post(t, ts, "/v1/completions", string(body))
	require.Equal(t, http.StatusOK, code, out)
	c := out["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, full[:strings.Index(full, stop)], c["text"])
	assert.Equal(t, "stop", c["finish_reason"])
}

// Every error class answers with its status and OpenAI's error body.
func TestErrors(t *testing.T) {
	_, ts := newTestServer(t, func(o *Options) {
		o.MaxBodyBytes = 4096
		o.MaxTokens = 64
		o.APIKey = "sk-test"
		o.Check = func(rows, prompt, tokens, logitRows int) error {
			if tokens > 200 {
				return errors.New("over 200 tokens")
			}
			return nil
		}
	})
	auth := []string{"Authorization", "Bearer sk-test"}
	cases := []struct {
		name, path, body string
		header           []string
		status           int
		param, code      string
	}{
		{"no key", "/v1/completions", `{"prompt":"hi"}`, nil, 401, "", "invalid_api_key"},
		{"wrong key", "/v1/completions", `{"prompt":"hi"}`, []string{"Authorization", "Bearer nope"}, 401, "", "invalid_api_key"},
		{"malformed JSON", "/v1/completions", `{"prompt":`, auth, 400, "", "invalid_json"},
		{"not an object", "/v1/completions", `[1,2]`, auth, 400, "", "invalid_json"},
		{"trailing data", "/v1/completions", `{"prompt":"hi"} {}`, auth, 400, "", "invalid_json"},
		{"unknown field", "/v1/completions", `{"prompt":"hi","frobnicate":1}`, auth, 400, "frobnicate", "unknown_parameter"},
		{"wrong type", "/v1/completions", `{"prompt":"hi","max_tokens":"ten"}`, auth, 400, "max_tokens", "invalid_type"},
		{"wrong prompt type", "/v1/completions", `{"prompt":{"a":1}}`, auth, 400, "prompt", "invalid_type"},
		{"no prompt", "/v1/completions", `{"max_tokens":1}`, auth, 400, "prompt", "invalid_value"},
		{"negative id", "/v1/completions", `{"prompt":[1,-2]}`, auth, 400, "prompt", "invalid_value"},
		{"id past the vocabulary", "/v1/completions", `{"prompt":[1,99999999]}`, auth, 400, "prompt", "invalid_value"},
		{"max_tokens over the cap", "/v1/completions", `{"prompt":"hi","max_tokens":65}`, auth, 400, "max_tokens", "invalid_value"},
		{"huge prompt", "/v1/completions", `{"prompt":"` + strings.Repeat("a b ", 300) + `","max_tokens":1}`, auth, 400, "prompt", "context_length_exceeded"},
		{"huge body", "/v1/completions", `{"prompt":"` + strings.Repeat("a", 5000) + `"}`, auth, 413, "", "request_too_large"},
		{"bad temperature", "/v1/completions", `{"prompt":"hi","temperature":-1}`, auth, 400, "temperature", "invalid_value"},
		{"n", "/v1/completions", `{"prompt":"hi","n":2}`, auth, 400, "n", "invalid_value"},
		{"wrong model", "/v1/completions", `{"model":"gpt-4","prompt":"hi"}`, auth, 404, "model", "model_not_found"},
		{"no messages", "/v1/chat/completions", `{"model":"demo"}`, auth, 400, "messages", "invalid_value"},
		{"messages not an array", "/v1/chat/completions", `{"messages":"hi"}`, auth, 400, "messages", "invalid_type"},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, auth, 400, "messages", "invalid_value"},
		{"bad kwargs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":[1]}`, auth, 400, "chat_template_kwargs", "invalid_value"},
		{"forced tool", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"}`, auth, 400, "tool_choice", "invalid_value"},
		{"unknown route", "/v1/embeddings", `{}`, auth, 404, "", "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(t, ts, c.path, c.body, c.header...)
			assert.Equal(t, c.status, code, out)
			e, ok := out["error"].(map[string]any)
			require.True(t, ok, "no error object: %v", out)
			assert.NotEmpty(t, e["message"])
			assert.NotEmpty(t, e["type"])
			assert.Contains(t, e, "param")
			if c.param == "" {
				assert.Nil(t, e["param"])
			} else {
				assert.Equal(t, c.param, e["param"])
			}
			assert.Equal(t, c.code, e["code"])
		})
	}
	get, err := http.NewRequest(http.MethodGet, ts.URL+"/v1/completions", nil)
	require.NoError(t, err)
	get.Header.Set(auth[0], auth[1])
	resp, err := ts.Client().Do(get)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	resp, err = ts.Client().Get(ts.URL + "/health") // no key needed
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// A full queue answers 429 at once; a request whose time runs out while
// it waits answers 408.
func TestQueueAndTimeout(t *testing.T) {
	s, ts := newTestServer(t, func(o *Options) { o.Queue = 1; o.Timeout = 300 * time.Millisecond; o.Parallel = 1 })
	require.NoError(t, s.model.acquire(context.Background(), 1)) // a request holds the model
	s.slots <- struct{}{}
	s.slots <- struct{}{} // and one waits
	code, out := post(t, ts, "/v1/completions", `{"prompt":"hi","max_tokens":1}`)
	assert.Equal(t, http.StatusTooManyRequests, code, out)
	assert.Equal(t, "rate_limit_exceeded", out["error"].(map[string]any)["code"])
	<-s.slots
	code, out = post(t, ts, "/v1/completions", `{"prompt":"hi","max_tokens":1}`)
	assert.Equal(t, http.StatusRequestTimeout, code, out)
	<-s.slots
	s.model.release(1)
	code, out = post(t, ts, "/v1/completions", `{"prompt":"hi","max_tokens":1}`)
	assert.Equal(t, http.StatusOK, code, out)
}

// A client that goes away stops the generation between tokens, streamed
// or not: the model is free again long before max_tokens is reached.
func TestCancelStopsGeneration(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s, ts := newTestServer(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4096,"stream":%v,"temperature":0}`, stream)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		done := make(chan struct{})
		var answer []byte
		go func() {
			defer close(done)
			if resp, err := ts.Client().Do(req); err == nil {
				answer, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
		}()
		for s.generated.Load() < 3 {
			select {
			case <-done:
				t.Fatalf("stream %v: the request ended before it was cancelled: %s", stream, answer)
			case <-time.After(time.Millisecond):
			}
		}
		cancel()
		<-done
		deadline := time.Now().Add(30 * time.Second)
		for s.active.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		inUse, _ := s.model.state()
		require.Zero(t, inUse, "stream %v: the generation did not stop after the client went away", stream)
		n := s.generated.Load()
		t.Logf("stream %v: stopped after %d tokens", stream, n)
		assert.Less(t, n, int64(4096), "stream %v", stream)
	}
}

// Streaming gives the same reply as a single answer, with the reasoning
// apart, and include_usage a last chunk with the counts.
func TestChatStreamMatchesSingle(t *testing.T) {
	_, ts := newTestServer(t, nil)
	body := `{"messages":[{"role":"user","content":"What is 2+2?"}],"max_tokens":24,"temperature":0,"seed":7`
	code, out := post(t, ts, "/v1/chat/completions", body+`}`)
	require.Equal(t, http.StatusOK, code, out)
	msg := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	resp, err := ts.Client().Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(body+`,"stream":true,"stream_options":{"include_usage":true}}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var reasoning, content strings.Builder
	var usage any
	lines := strings.Split(strings.TrimSpace(string(data)), "\n\n")
	require.Equal(t, "data: [DONE]", lines[len(lines)-1])
	for _, l := range lines[:len(lines)-1] {
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &c))
		if u, ok := c["usage"]; ok {
			usage = u
		}
		for _, ch := range c["choices"].([]any) {
			d := ch.(map[string]any)["delta"].(map[string]any)
			if v, ok := d["reasoning_content"].(string); ok {
				reasoning.WriteString(v)
			}
			if v, ok := d["content"].(string); ok {
				content.WriteString(v)
			}
		}
	}
	assert.Equal(t, msg["reasoning_content"], reasoning.String())
	assert.Equal(t, msg["content"], content.String())
	assert.Equal(t, out["usage"], usage)
	assert.NotEmpty(t, reasoning.String(), "the template opens <think>: the reply is reasoning until </think>")
}

func TestModels(t *testing.T) {
	_, ts := newTestServer(t, nil)
	resp, err := ts.Client().Get(ts.URL + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Object string `json:"object"`
		Data   []struct{ ID, Object string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	assert.Equal(t, "list", out.Object)
	require.Len(t, out.Data, 1)
	assert.Equal(t, "demo", out.Data[0].ID)
	resp2, err := ts.Client().Get(ts.URL + "/v1/models/other")
	require.NoError(t, err)
	resp2.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp2.StatusCode)
}
