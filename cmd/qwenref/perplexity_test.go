package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bench"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/weights"
)

type pplOutput struct {
	Tokens, Rows, Ctx, Stride int
	Results                   []bench.PerplexityResult
}

// With one window per row, qwenref perplexity equals the perplexity of
// transformers' logits in the goldens to 1e-5 relative, on every backend
// asked for, and reports their difference.
func TestPerplexityCommandMatchesGoldens(t *testing.T) {
	for _, name := range []string{"causal-f32-t70-b2", "hub-bf16-sharded", "causal-f16-t130"} {
		dir := filepath.Join(goldenRoot, name)
		var in struct{ IDs [][]int }
		data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &in))
		exp, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
		require.NoError(t, err)
		logits, shape, err := exp.Float32("logits")
		exp.Close()
		require.NoError(t, err)
		v := shape[len(shape)-1]
		var sum float64
		n := 0
		for b, ids := range in.IDs {
			for j := 1; j < len(ids); j++ {
				p := (b*len(ids) + j - 1) * v
				sum += generate.TokenNLL(logits[p:p+v], ids[j])
				n++
			}
		}
		want := math.Exp(sum / float64(n))

		t1 := len(in.IDs[0])
		code, stdout, stderr := runCLI("perplexity", "--model", dir, "--ids-json", writeIDs(t, t.TempDir(), in.IDs),
			"--ctx", itoa(t1), "--stride", itoa(t1), "--backends", "chunked,naive", "--json")
		require.Equal(t, 0, code, stderr)
		var out pplOutput
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		require.Len(t, out.Results, 2)
		for _, r := range out.Results {
			assert.Equal(t, n, r.Scored, name)
			assert.LessOrEqual(t, math.Abs(r.Perplexity-want)/want, 1e-5, "%s on %s: %v, transformers' logits give %v", name, r.Backend, r.Perplexity, want)
		}
		require.NotNil(t, out.Results[1].DeltaMeanNLL)
		assert.InDelta(t, out.Results[1].MeanNLL-out.Results[0].MeanNLL, *out.Results[1].DeltaMeanNLL, 1e-15)
		assert.Less(t, *out.Results[1].MaxAbsTokenNLL, 1e-3)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestPerplexityCommandTextAndErrors(t *testing.T) {
	code, stdout, stderr := runCLIStdin("The gated delta rule updates its state by a rank-one correction.", "perplexity", "--text-file", "-", "--ctx", "8", "--stride", "4")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "windows of 8 advanced by 4\nchunked: [1]")
	code, js, stderr := runCLIStdin("The gated delta rule updates its state by a rank-one correction.", "perplexity", "--text-file", "-", "--ctx", "8", "--stride", "4", "--json")
	require.Equal(t, 0, code, stderr)
	var out pplOutput
	require.NoError(t, json.Unmarshal([]byte(js), &out))
	r := out.Results[0]
	assert.Positive(t, r.PerplexityStdErr)
	assert.InEpsilon(t, r.MeanNLLStdErr*r.Perplexity, r.PerplexityStdErr, 1e-12)
	assert.Contains(t, stdout, fmt.Sprintf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.Perplexity, r.PerplexityStdErr), "the text says what --json says, as llama-perplexity prints it")

	dir := filepath.Join(goldenRoot, "hub-bf16-sharded")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"perplexity", "--model", dir}, 2, "exactly one of"},
		{[]string{"perplexity", "--model", dir, "--ids", "1,2", "--text-file", "x"}, 2, "exactly one of"},
		{[]string{"perplexity", "--model", dir, "--ids", "1,2,3", "--ctx", "1"}, 2, "--ctx"},
		{[]string{"perplexity", "--model", dir, "--ids", "1,2,3", "--ctx", "4", "--stride", "5"}, 2, "--stride"},
		{[]string{"perplexity", "--model", dir, "--ids", "1"}, 1, "row 0 has 1 token: perplexity needs at least 2"},
		{[]string{"perplexity", "--model", dir, "--ids", "1,999"}, 1, "outside the vocabulary"},
		{[]string{"perplexity", "--model", dir, "--ids", "1,2", "--backends", "chunked,,naive"}, 2, "empty entry"},
		{[]string{"perplexity", "--model", dir, "--ids", "1,2", "--backends", "tpu"}, 1, `unknown backend "tpu"`},
	} {
		code, _, stderr := runCLI(c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, c.args)
	}
}
