package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/serve"
)

func init() {
	register(&command{name: "serve", summary: "an OpenAI-compatible HTTP server (completions with logprobs, chat) for clients and evaluation harnesses", run: runServe})
}

// apiKeyEnv is read when --api-key is not given.
const apiKeyEnv = "QWENREF_API_KEY"

// serveContext is the server's lifetime: until SIGINT or SIGTERM (tests
// replace it).
var serveContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "[--model DIR] [--host H] [--port P] [--api-key K] [--backend B]", `
Serves the model over OpenAI's API, for OpenAI clients and evaluation
harnesses (lm-evaluation-harness's local-completions):

  GET  /v1/models             the one model (its id: --served-model-name)
  POST /v1/completions        prompt as text or token ids; logprobs, echo
  POST /v1/chat/completions   the checkpoint's chat template, tools,
                              chat_template_kwargs, stream; Qwen3's
                              <think> block as reasoning_content
  GET  /health

A reference server (--parallel requests at once, perplexity's logprobs, a
flag per bound); at scale use vLLM or SGLang. A request's temperature, top_p,
top_k, min_p, repetition_penalty and seed replace generation_config.json's.
The API key is --api-key or $`+apiKeyEnv+`. See docs/serve.md.

Examples:
  qwenref serve --model Qwen/Qwen3.5-0.8B --port 8000
  curl -s localhost:8000/v1/completions -d '{"prompt": "Hello", "max_tokens": 8}'`, stderr)
	dir := addModelFlag(fs, demoModel)
	tokPath := fs.String("tokenizer", "", "tokenizer.json to use instead of DIR/tokenizer.json")
	tplFile := fs.String("chat-template-file", "", "chat template to use instead of the checkpoint's (a Jinja file, tokenizer_config.json or chat_template.json)")
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	mem := addMemoryFlag(fs)
	host := fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0: every interface; mind --api-key)")
	port := fs.Int("port", 8000, "port to listen on (0: any free port)")
	apiKey := fs.String("api-key", "", "bearer token every /v1 request must carry (default $"+apiKeyEnv+"; none: no check)")
	name := fs.String("served-model-name", "", "the model's id in the API (default: --model as given, or qwenref-demo)")
	maxBody := fs.Int64("max-body", serve.DefaultMaxBodyBytes, "largest request body in bytes (413 above)")
	maxTokens := fs.Int("max-tokens", serve.DefaultMaxTokens, "largest max_tokens a request may ask (400 above); chat's default")
	parallel := fs.Int("parallel", 0, "requests that generate at once, each on its own runner (default: 1 on a GPU backend, which serves one at a time; else 2, or 1 on one thread); one that would not fit --max-memory that many times runs alone")
	queue := fs.Int("queue", serve.DefaultQueue, "requests that may wait behind the running ones (429 beyond)")
	timeout := fs.Duration("timeout", serve.DefaultTimeout, "time limit of one request, waiting included (408 past it)")
	quiet := fs.Bool("quiet", false, "no line per request on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *port < 0 || *port > 65535:
		return usageError(fs, stderr, "--port must be in [0, 65535], got %d", *port)
	case *maxBody < 1 || *maxTokens < 1 || *queue < 0 || *timeout <= 0 || *parallel < 0 || *parallel > serve.MaxParallel:
		return usageError(fs, stderr, "--max-body, --max-tokens and --timeout must be positive, --queue ≥ 0 and --parallel in [0, %d]", serve.MaxParallel)
	}
	if *queue == 0 {
		*queue = -1 // serve.Options: 0 is its default; the flag's 0 means no queue
	}
	key := *apiKey
	if key == "" {
		key = os.Getenv(apiKeyEnv)
	}
	given := *dir
	if err := resolveModelFlag(dir, stderr); err != nil {
		return err
	}
	cf := chatFlags{file: tplFile}
	tpl, err := cf.template(*dir, true, stderr)
	if err != nil {
		return err
	}
	op, tok, err := openFlags{dir: dir, backend: backend, plugins: plugins, mem: mem}.openText(model.OpenOptions{BoundHeap: true}, *tokPath, stderr, stderr)
	if err != nil {
		return err
	}
	defer op.Close()
	if *name == "" {
		*name = given
		if given == "" {
			*name = "qwenref-demo"
		} else if st, err := os.Stat(given); err == nil && st.IsDir() {
			*name = filepath.Base(filepath.Clean(given))
		}
	}
	o := serve.Options{Model: op.Model, Backend: op.Backend, Codec: tok, Template: tpl, Name: *name, APIKey: key,
		MaxBodyBytes: *maxBody, MaxTokens: *maxTokens, Queue: *queue, Timeout: *timeout, Parallel: *parallel,
		Settings: func(s generate.SamplingOverrides) (generate.GenerationSettings, error) {
			return generate.LoadGenerationSettings(op.Dir, s)
		},
		Check: func(rows, prompt, tokens, logitRows int) error {
			return op.CheckGeneration(rows, prompt, tokens, rows*logitRows, "the prompt plus max_tokens")
		}}
	if !*quiet {
		o.Log = stderr
	}
	srv, err := serve.New(o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	ctx, stop := serveContext()
	defer stop()
	auth := "no API key"
	if key != "" {
		auth = "API key required"
	}
	fmt.Fprintf(stderr, "serving %s on http://%s/v1 (%s, backend %s, %d at once); Ctrl-C stops\n", *name, ln.Addr(), auth, op.Backend.Name, srv.Parallel())
	start := time.Now()
	err = srv.Serve(ctx, ln)
	fmt.Fprintf(stderr, "stopped after %s\n", time.Since(start).Round(time.Second))
	return err
}
