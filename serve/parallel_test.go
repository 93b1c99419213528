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
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

// waitLimit bounds every wait of these tests: a run that never comes
// fails the test instead of hanging it.
const waitLimit = 30 * time.Second

// newHookedServer is newTestServer with onToken set before the server
// starts (so the handlers see it without a race).
func newHookedServer(t *testing.T, edit func(*Options), hook func(n int)) (*Server, *httptest.Server) {
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
	s.onToken = hook
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// reply is one answer: its status and body.
type reply struct {
	code int
	body map[string]any
	err  error
}

// send posts body from any goroutine (no require there).
func send(ctx context.Context, ts *httptest.Server, path, body string) reply {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, strings.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{err: err}
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return reply{err: fmt.Errorf("%w: %s", err, data)}
	}
	return reply{code: resp.StatusCode, body: out}
}

// sendAll posts every body at once and returns the replies in order.
func sendAll(ts *httptest.Server, path string, bodies []string) []reply {
	out := make([]reply, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() { out[i] = send(context.Background(), ts, path, b) })
	}
	wg.Wait()
	return out
}

// barrier holds each caller until k have arrived, or fails t after
// waitLimit and lets them go.
type barrier struct {
	t       *testing.T
	k       int
	arrived atomic.Int64
	open    chan struct{}
}

func newBarrier(t *testing.T, k int) *barrier { return &barrier{t: t, k: k, open: make(chan struct{})} }

func (b *barrier) wait() {
	if b.arrived.Add(1) == int64(b.k) {
		close(b.open)
	}
	select {
	case <-b.open:
	case <-time.After(waitLimit):
		b.t.Errorf("only %d of %d runs reached their first token together", b.arrived.Load(), b.k)
	}
}

// waitFor polls cond until it holds, failing after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitLimit, what)
		}
	}
}

// K requests at once (greedy, seeded sampling, echo; completions and
// chat) answer exactly what the same requests answer one at a time: text,
// tokens and logprobs bit for bit on the fp32 CPU backends. Every run has
// drawn its first token before any goes on, so they did overlap.
func TestParallelEqualsSequential(t *testing.T) {
	ids := `[785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]`
	completions := []string{
		`{"prompt":` + ids + `,"max_tokens":8,"temperature":0,"logprobs":3}`,
		`{"prompt":` + ids + `,"max_tokens":8,"temperature":0.9,"seed":11,"logprobs":2}`,
		`{"prompt":"Once upon a time","max_tokens":8,"temperature":1.2,"top_k":40,"seed":12,"logprobs":1,"echo":true}`,
	}
	chats := []string{
		`{"messages":[{"role":"user","content":"What is 2+2?"}],"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":2}`,
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":0.8,"seed":5,"logprobs":true}`,
	}
	demoModel, _, _ := demo(t)
	cfg, err := model.ShapeConfig("tiny-moe") // the routed experts' kernels too
	require.NoError(t, err)
	cfg.VocabSize, cfg.EOSTokenIDs = demoModel.Config.VocabSize, demoModel.Config.EOSTokenIDs
	require.NoError(t, cfg.Validate())
	moeModel, err := model.NewRandom(cfg, 7, true)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, spec string
		m          *model.Model
	}{{"chunked", "chunked", demoModel}, {"naive", "naive", demoModel}, {"moe", "chunked", moeModel}} {
		t.Run(tc.name, func(t *testing.T) {
			be, err := model.ParseBackend(tc.spec)
			require.NoError(t, err)
			for _, c := range []struct {
				path   string
				bodies []string
			}{{"/v1/completions", completions}, {"/v1/chat/completions", chats}} {
				_, seq := newHookedServer(t, func(o *Options) { o.Model, o.Backend, o.Parallel = tc.m, be, 1 }, nil)
				var want []reply
				for _, b := range c.bodies {
					want = append(want, send(context.Background(), seq, c.path, b))
				}
				k := len(c.bodies)
				bar := newBarrier(t, k)
				s, par := newHookedServer(t, func(o *Options) { o.Model, o.Backend, o.Parallel = tc.m, be, k }, func(n int) {
					if n == 1 {
						bar.wait()
					}
				})
				got := sendAll(par, c.path, c.bodies)
				for i := range c.bodies {
					require.NoError(t, want[i].err)
					require.NoError(t, got[i].err)
					require.Equal(t, http.StatusOK, want[i].code, want[i].body)
					require.Equal(t, http.StatusOK, got[i].code, got[i].body)
					assert.Equal(t, want[i].body["choices"], got[i].body["choices"], "%s request %d", c.path, i)
					assert.Equal(t, want[i].body["usage"], got[i].body["usage"], "%s request %d", c.path, i)
				}
				assert.Equal(t, int64(k), s.peak.Load(), "%s: the runs did not all generate at once", c.path)
			}
		})
	}
}

// With the model's N runs busy and the queue full, the next request is
// refused at once with 429 and OpenAI's error body; the others then end
// normally.
func TestParallelQueueFull(t *testing.T) {
	hold, started := make(chan struct{}), make(chan struct{}, 8)
	s, ts := newHookedServer(t, func(o *Options) { o.Parallel = 2; o.Queue = 1 }, func(n int) {
		if n == 1 {
			started <- struct{}{}
			<-hold
		}
	})
	body := `{"prompt":"hi","max_tokens":2,"temperature":0}`
	replies := make(chan reply, 3)
	for range 3 {
		go func() { replies <- send(context.Background(), ts, "/v1/completions", body) }()
	}
	for i := range 2 {
		select {
		case <-started:
		case <-time.After(waitLimit):
			close(hold)
			t.Fatalf("only %d of 2 requests started generating", i)
		}
	}
	waitFor(t, "the third request to wait", func() bool { _, waiting := s.model.state(); return waiting == 1 })
	r := send(context.Background(), ts, "/v1/completions", body)
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusTooManyRequests, r.code)
	e, ok := r.body["error"].(map[string]any)
	require.True(t, ok, "no error object: %v", r.body)
	assert.Equal(t, "rate_limit_error", e["type"])
	assert.Equal(t, "rate_limit_exceeded", e["code"])
	assert.Contains(t, e, "param")
	assert.Nil(t, e["param"])
	assert.Contains(t, e["message"], "2 requests run")
	close(hold)
	for range 3 {
		r := <-replies
		require.NoError(t, r.err)
		assert.Equal(t, http.StatusOK, r.code, r.body)
	}
}

// A client that goes away frees its run's place at once: with N = 2, one
// request held at its first token and the other cancelled mid-generation,
// a third request runs to the end while the first is still held.
func TestParallelCancelFreesSlot(t *testing.T) {
	hold, heldStarted := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s, ts := newHookedServer(t, func(o *Options) { o.Parallel = 2; o.Queue = 4; o.Timeout = waitLimit }, func(n int) {
		if n == 1 && first.CompareAndSwap(false, true) { // the first run to draw a token is held
			close(heldStarted)
			<-hold
		}
	})
	defer close(hold)
	heldReply := make(chan reply, 1)
	go func() {
		heldReply <- send(context.Background(), ts, "/v1/completions", `{"prompt":"held","max_tokens":2,"temperature":0}`)
	}()
	select {
	case <-heldStarted:
	case <-time.After(waitLimit):
		t.Fatal("the first request never drew a token")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan reply, 1)
	go func() {
		cancelled <- send(ctx, ts, "/v1/completions", `{"prompt":"long","max_tokens":4096,"temperature":0}`)
	}()
	waitFor(t, "the long request to generate", func() bool { return s.generated.Load() >= 4 })
	cancel()
	r := <-cancelled
	require.True(t, errors.Is(r.err, context.Canceled), "the long request ended by itself: %v %v", r.err, r.body)

	r = send(context.Background(), ts, "/v1/completions", `{"prompt":"after","max_tokens":2,"temperature":0}`)
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusOK, r.code, "the cancelled request's place was not freed: %v", r.body)
	select {
	case r := <-heldReply:
		t.Fatalf("the held request ended before it was let go: %v", r)
	default:
	}
	assert.Less(t, s.generated.Load(), int64(4096))
}

// The memory rule: a run that fits --max-memory alone but not Parallel
// times runs alone (it waits, and two such never overlap); small runs
// overlap; one that does not fit alone is refused with 400.
func TestParallelMemoryRunsAlone(t *testing.T) {
	var mu sync.Mutex
	var atFirst []int64 // active runs when each run drew its first token
	var bar atomic.Pointer[barrier]
	var holdFirst atomic.Bool
	var s *Server
	s, ts := newHookedServer(t, func(o *Options) {
		o.Parallel = 2
		o.Timeout = waitLimit
		o.Check = func(rows, prompt, tokens, logitRows int) error {
			if rows*tokens > 100 {
				return fmt.Errorf("%d×%d tokens are over the test's 100", rows, tokens)
			}
			return nil
		}
	}, func(n int) {
		if n != 1 {
			return
		}
		mu.Lock()
		atFirst = append(atFirst, s.active.Load())
		mu.Unlock()
		if holdFirst.CompareAndSwap(true, false) {
			// Hold the first run until the second has come in: it waits
			// for the model, or (wrongly) runs beside this one.
			for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if _, waiting := s.model.state(); waiting == 1 || s.active.Load() == 2 {
					return
				}
			}
			t.Errorf("the second big request never came in")
		}
		if b := bar.Load(); b != nil {
			b.wait()
		}
	})
	prompt := `[785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]`       // 10 tokens
	big := fmt.Sprintf(`{"prompt":%s,"max_tokens":50,"temperature":0}`, prompt)   // 60 tokens: 1×60 fits, 2×60 does not
	small := fmt.Sprintf(`{"prompt":%s,"max_tokens":20,"temperature":0}`, prompt) // 30: 2×30 fits

	// Two big ones at once: the second waits until the first has ended.
	holdFirst.Store(true)
	for i, r := range sendAll(ts, "/v1/completions", []string{big, big}) {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.code, "big %d: %v", i, r.body)
	}
	assert.Equal(t, []int64{1, 1}, atFirst, "two runs that fit only alone ran together")
	assert.Equal(t, int64(1), s.peak.Load())

	// Two small ones at once overlap: both draw a token before either goes on.
	bar.Store(newBarrier(t, 2))
	for i, r := range sendAll(ts, "/v1/completions", []string{small, small}) {
		require.NoError(t, r.err)
		require.Equal(t, http.StatusOK, r.code, "small %d: %v", i, r.body)
	}
	assert.Equal(t, int64(2), s.peak.Load(), "two runs that fit together did not overlap")

	r := send(context.Background(), ts, "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":100,"temperature":0}`, prompt))
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusBadRequest, r.code)
	assert.Equal(t, "context_length_exceeded", r.body["error"].(map[string]any)["code"])
}

// A device-resident backend is refused more than one run at once, saying
// why; any other takes them.
func TestParallelResidentRefused(t *testing.T) {
	m, tok, _ := demo(t)
	resident := &model.Backend{Name: "fake-device", Device: &model.Device{Name: "fake",
		NewRunner: func(*model.Model, int) (model.Runner, error) { return nil, errors.New("unused") }}}
	o := Options{Model: m, Backend: resident, Codec: tok, Name: "demo", Parallel: 2,
		Settings: func(generate.SamplingOverrides) (generate.GenerationSettings, error) {
			return generate.GenerationSettings{}, nil
		}}
	_, err := New(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--parallel 2")
	assert.Contains(t, err.Error(), "one request at a time")
	o.Parallel = 0
	s, err := New(o)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Parallel(), "a device backend's default")
}
