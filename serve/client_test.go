package serve

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/generate"
)

// clientPrefixEnv names the npm prefix the openai package is installed
// under (npm install --prefix DIR openai@VERSION); .ci/run sets it.
const clientPrefixEnv = "QWENREF_OPENAI_NODE_PREFIX"

// The official openai npm client talks to the server: models, completions
// (text, ids, logprobs, echo), chat (plain, streamed, with tools),
// an abort mid-stream that stops the generation, requests sent at once
// that answer what they answer one at a time, and bad requests, each
// answered with the status and error fields the client reads.
func TestOpenAIClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the openai client test needs node and the openai npm package (.ci/run installs both)")
	}
	prefix := os.Getenv(clientPrefixEnv)
	if prefix == "" {
		t.Skipf("%s is not set: install the client with npm install --prefix DIR openai and set it to DIR", clientPrefixEnv)
	}
	if _, err := os.Stat(filepath.Join(prefix, "node_modules", "openai", "package.json")); err != nil {
		t.Skipf("the openai npm package is not under %s=%s: %v", clientPrefixEnv, prefix, err)
	}
	s, ts := newTestServer(t, func(o *Options) { o.APIKey = "sk-node"; o.MaxTokens = 4000; o.Parallel = 3 })
	m, _, be := demo(t)
	ids := []int{785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13}
	idsJSON, _ := json.Marshal(ids)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "openai_client.cjs"), ts.URL+"/v1", "sk-node", string(idsJSON))
	cmd.Env = append(os.Environ(), "NODE_PREFIX="+prefix)
	stdout, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "node: %s", stderr)
	var out struct {
		Model        string
		Echo         []*float64
		AbortedAfter int
		Concurrent   int
		Errors       map[string]struct {
			Status      int
			Param, Code *string
		}
	}
	require.NoError(t, json.Unmarshal(stdout, &out), "%s", stdout)
	assert.Equal(t, "demo", out.Model)

	want, err := generate.Perplexity(m, ids, be, len(ids), len(ids), nil)
	require.NoError(t, err)
	require.Len(t, out.Echo, len(ids))
	for j := 1; j < len(ids); j++ {
		require.NotNil(t, out.Echo[j])
		assert.Equal(t, -want.NLL[j], *out.Echo[j], "token %d: the client's logprob is −NLL of perplexity", j)
	}

	// Three requests sent with Promise.all answered what they answer one
	// at a time (the script checks); how many overlapped is up to timing.
	assert.Equal(t, 3, out.Concurrent)
	t.Logf("at most %d runs at once", s.peak.Load())

	// The abort came after 3 chunks of a 4,000-token request: everything
	// the server generated in the whole run is far below that.
	assert.Equal(t, 3, out.AbortedAfter)
	assert.Less(t, s.generated.Load(), int64(2000), "the aborted stream went on generating")
	inUse, _ := s.model.state()
	assert.Zero(t, inUse)

	status := func(name string, code int, param string) {
		e, ok := out.Errors[name]
		if !assert.True(t, ok, name) {
			return
		}
		assert.Equal(t, code, e.Status, name)
		if param != "" && assert.NotNil(t, e.Param, name) {
			assert.Equal(t, param, *e.Param, name)
		}
	}
	status("badKey", 401, "")
	status("unknownParam", 400, "frobnicate")
	status("wrongType", 400, "max_tokens")
	status("tooManyTokens", 400, "max_tokens")
	status("wrongModel", 404, "model")
	status("noMessages", 400, "messages")
}
