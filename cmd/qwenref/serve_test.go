package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe to read while the command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve listens on loopback, says where, answers with the API key from
// the environment, and stops when its context ends.
func TestServeCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer func(old func() (context.Context, context.CancelFunc)) { serveContext = old }(serveContext)
	serveContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	t.Setenv(apiKeyEnv, "sk-cli")
	var stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main([]string{"serve", "--port", "0", "--quiet", "--parallel", "3"}, io.Discard, &stderr)
	}()
	addr := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/v1) \(API key required, backend \S+, 3 at once\)`)
	var base string
	for deadline := time.Now().Add(60 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
		}
	}
	require.NotEmpty(t, base, "no address on stderr: %s", stderr.String())
	get := func(key string) int {
		req, err := http.NewRequest(http.MethodGet, base+"/models", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			assert.Contains(t, string(body), `"qwenref-demo"`)
		}
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, get("sk-cli"))
	assert.Equal(t, http.StatusUnauthorized, get("other"))
	cancel()
	select {
	case c := <-code:
		assert.Equal(t, 0, c, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop when its context ended")
	}
}

func TestServeFlags(t *testing.T) {
	for _, args := range [][]string{{"--port", "70000"}, {"--max-tokens", "0"}, {"--timeout", "-1s"}, {"--parallel", "-1"}, {"--parallel", "257"}} {
		var stderr bytes.Buffer
		assert.Equal(t, 2, Main(append([]string{"serve"}, args...), io.Discard, &stderr), args)
		assert.True(t, strings.Contains(stderr.String(), "must"), stderr.String())
	}
}
