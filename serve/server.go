// Package serve is qwenref's OpenAI-compatible reference server: /v1/models,
// /v1/completions (with echo and prompt logprobs, as evaluation harnesses
// score text), /v1/chat/completions (the checkpoint's chat template, tools,
// streaming, the reasoning apart) and /health, over generate and model.
//
// It is a reference, not a serving engine: up to Options.Parallel requests
// generate at once, each on its own runner (no batching across requests),
// and every bound (body size, max_tokens, memory, queue, time) is explicit. Its logprobs
// are the CPU path's, computed as generate.Perplexity computes them.
package serve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

// Defaults of Options' bounds.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultMaxTokens    = 4096
	DefaultQueue        = 16
	DefaultTimeout      = 10 * time.Minute
	// CompletionDefaultTokens is max_tokens when a completion leaves it
	// out, as OpenAI's API does.
	CompletionDefaultTokens = 16
	// MaxPrompts bounds the prompts of one completions request.
	MaxPrompts = 64
	// MaxTopLogprobs bounds logprobs and top_logprobs.
	MaxTopLogprobs = 20
	// MaxStops bounds the stop strings of a request, each of at most
	// MaxStopBytes.
	MaxStops, MaxStopBytes = 16, 256
	// MaxParallel bounds Options.Parallel: each run holds a forward's
	// buffers and its caches.
	MaxParallel = 256
)

// Options configure New.
type Options struct {
	Model   *model.Model
	Backend *model.Backend
	// Codec encodes prompts and decodes tokens: the checkpoint's tokenizer.
	Codec generate.TextCodec
	// Template renders chat requests (nil: /v1/chat/completions refuses).
	Template *chat.Template
	// Settings builds a request's sampling from its values over the
	// checkpoint's generation_config.json (generate.LoadGenerationSettings).
	Settings func(generate.SamplingOverrides) (generate.GenerationSettings, error)
	// Name is the model id /v1/models lists and requests name.
	Name string
	// APIKey, if set, is the bearer token every /v1 request must carry.
	APIKey string
	// MaxBodyBytes, MaxTokens, Queue and Timeout bound a request's body,
	// its max_tokens, the requests waiting behind the running ones (more
	// get 429; negative: none wait) and its time; 0 takes the Default.
	MaxBodyBytes int64
	MaxTokens    int
	Queue        int
	Timeout      time.Duration
	// Parallel is how many requests generate at once, each on its own
	// runner; 0 takes DefaultParallel(Backend). A device-resident backend
	// takes only 1 (see New).
	Parallel int
	// Check, if set, bounds a run before its prefill (model.Opened's
	// CheckGeneration): rows runs of prompt tokens, all tokens and
	// logitRows rows of logits each, live at once. The server asks for
	// rows = Parallel; a run that fits only as rows = 1 runs alone.
	Check func(rows, prompt, tokens, logitRows int) error
	// Log, if set, receives a line per request.
	Log io.Writer
}

// Server answers OpenAI's API. It is an http.Handler.
type Server struct {
	o       Options
	mux     *http.ServeMux
	slots   chan struct{} // admission: the running requests and the queue
	model   *gate         // the model: Parallel runs at once
	created int64
	logMu   sync.Mutex
	// generated counts the tokens drawn since start (a test watches a
	// cancelled request stop); active counts the runs generating now and
	// peak the most at once.
	generated, active, peak atomic.Int64
	// onToken, if set, is called after each token a run draws, with the
	// run's count so far (tests hold runs there to see them overlap).
	onToken func(n int)
}

// DefaultParallel is Options.Parallel's default on be: 1 on a backend with
// a device, whose calls share one stream; else 2 on 2 or more threads
// (GOMAXPROCS): a short request then runs beside a long one instead of
// behind it, and the tokens per second of the two together were those of
// one alone or a little more (docs/serve.md), while each run adds its
// caches; 1 on one thread, where two only take turns.
func DefaultParallel(be *model.Backend) int {
	if be != nil && be.Device != nil {
		return 1
	}
	if runtime.GOMAXPROCS(0) >= 2 {
		return 2
	}
	return 1
}

// New checks o and returns the server.
func New(o Options) (*Server, error) {
	switch {
	case o.Model == nil || o.Backend == nil || o.Codec == nil:
		return nil, errors.New("serve: a model, a backend and a tokenizer are needed")
	case o.Settings == nil:
		return nil, errors.New("serve: Settings is nil")
	case o.Name == "":
		return nil, errors.New("serve: the model needs a name")
	case o.MaxBodyBytes < 0 || o.MaxTokens < 0 || o.Timeout < 0 || o.Parallel < 0:
		return nil, errors.New("serve: negative bound")
	case o.Parallel > MaxParallel:
		return nil, fmt.Errorf("serve: --parallel %d is over the limit of %d", o.Parallel, MaxParallel)
	case o.Parallel > 1 && o.Backend.Resident():
		return nil, fmt.Errorf("serve: --parallel %d on backend %s: a device-resident backend serves one request at a time "+
			"(each request's runner would upload its own copy of the weights, and the device runs their calls one after another on one stream; "+
			"batching concurrent requests as rows of one forward is not done yet): use --parallel 1", o.Parallel, o.Backend.Name)
	}
	if o.Parallel == 0 {
		o.Parallel = DefaultParallel(o.Backend)
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.Queue == 0 {
		o.Queue = DefaultQueue
	} else if o.Queue < 0 {
		o.Queue = 0
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	s := &Server{o: o, mux: http.NewServeMux(), slots: make(chan struct{}, o.Queue+o.Parallel),
		model: newGate(o.Parallel), created: time.Now().Unix()}
	s.mux.HandleFunc("/health", s.health)
	s.mux.HandleFunc("/v1/models", s.auth(s.models))
	s.mux.HandleFunc("/v1/models/{id...}", s.auth(s.models))
	s.mux.HandleFunc("/v1/completions", s.auth(s.post(s.completions)))
	s.mux.HandleFunc("/v1/chat/completions", s.auth(s.post(s.chatCompletions)))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(http.StatusNotFound, "", "not_found", "no route %s %s", r.Method, r.URL.Path))
	})
	// A server idles between requests: what loading left free goes back to
	// the OS before the first.
	debug.FreeOSMemory()
	return s, nil
}

// Parallel is how many requests generate at once.
func (s *Server) Parallel() int { return s.o.Parallel }

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	s.mux.ServeHTTP(rec, r)
	if s.o.Log != nil {
		s.logMu.Lock()
		fmt.Fprintf(s.o.Log, "%s %s %s %d %s\n", start.Format(time.RFC3339), r.Method, r.URL.Path, rec.code, time.Since(start).Round(time.Millisecond))
		s.logMu.Unlock()
	}
}

// Serve answers on ln until ctx ends, then lets the running requests end
// (their contexts are cancelled) for at most 5 seconds.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-done
		return nil
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, apiErr(http.StatusMethodNotAllowed, "", "method_not_allowed", "%s takes GET", r.URL.Path))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// auth refuses a request without the API key, as OpenAI's API does.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.o.APIKey != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.o.APIKey)) != 1 {
				msg := "Incorrect API key provided."
				if !ok {
					msg = "You didn't provide an API key: pass it as 'Authorization: Bearer KEY'."
				}
				writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg})
				return
			}
		}
		h(w, r)
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, apiErr(http.StatusMethodNotAllowed, "", "method_not_allowed", "%s takes GET", r.URL.Path))
		return
	}
	card := map[string]any{"id": s.o.Name, "object": "model", "created": s.created, "owned_by": "qwenref",
		"max_model_len": s.o.Model.Config.MaxPositionEmbeddings}
	if id := r.PathValue("id"); id != "" {
		if id != s.o.Name {
			writeError(w, modelNotFound(id))
			return
		}
		writeJSON(w, http.StatusOK, card)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{card}})
}

func modelNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model %q does not exist: this server serves one model (GET /v1/models)", id)}
}

// post reads a POST body within the size bound and hands it on.
func (s *Server) post(h func(ctx context.Context, w http.ResponseWriter, body []byte) *apiError) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, apiErr(http.StatusMethodNotAllowed, "", "method_not_allowed", "%s takes POST", r.URL.Path))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, apiErr(http.StatusRequestEntityTooLarge, "", "request_too_large", "the request body is over the server's limit of %d bytes (--max-body)", s.o.MaxBodyBytes))
				return
			}
			writeError(w, apiErr(http.StatusBadRequest, "", "", "reading the request body: %v", err))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.o.Timeout)
		defer cancel()
		if e := h(ctx, w, body); e != nil {
			writeError(w, e)
		}
	}
}

// acquire admits a request to the queue and waits for units of the model
// (1, or Parallel to run alone); 429 when the queue is full. release must
// be called when it returns nil.
func (s *Server) acquire(ctx context.Context, units int) (release func(), e *apiError) {
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("the server is busy: %d requests run (--parallel) and %d wait (--queue); retry later", s.o.Parallel, s.o.Queue)}
	}
	if err := s.model.acquire(ctx, units); err != nil {
		<-s.slots
		return nil, ctxError(ctx)
	}
	for n := s.active.Add(1); ; {
		if p := s.peak.Load(); n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { s.active.Add(-1); s.model.release(units); <-s.slots }, nil
}

// ctxError is the error of a request whose context ended: its time ran
// out, or the client went away (nobody reads that answer).
func ctxError(ctx context.Context) *apiError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &apiError{Status: http.StatusRequestTimeout, Type: "timeout_error", Code: "timeout",
			Message: "the request ran past the server's per-request time limit (--timeout)"}
	}
	return &apiError{Status: 499, Type: "cancelled", Code: "cancelled", Message: "the client closed the request"}
}

// statusWriter notes the status code for the log, and flushes.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
