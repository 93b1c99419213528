package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The default command runs the bundled demo and says the weights are random.
func TestRunBundledDefault(t *testing.T) {
	code, stdout, stderr := runCLI("--max-new-tokens", "3", "--compare", "all")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "RANDOM weights")
	assert.Equal(t, 3, strings.Count(stdout, "prompt ("), "one block per sample prompt")
	assert.Contains(t, stdout, "prefill")
	assert.Contains(t, stdout, "prompt logits vs")
}

func TestRunTopProbsAndChat(t *testing.T) {
	code, stdout, stderr := runCLI("run", "--prompt", "hi", "--chat", "--top-probs", "2", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "prompt (")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	assert.GreaterOrEqual(t, len(lines), 4)
}

func TestRunErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--temperature", "-1"}, 1, "temperature"},
		{[]string{"run", "--max-new-tokens", "0"}, 1, "--max-new-tokens"},
		{[]string{"run", "--compare", "some"}, 1, "--compare"},
		{[]string{"run", "--model", "../../testdata/golden/hub-bf16-sharded", "--prompt", "x"}, 1, "no tokenizer"},
		{[]string{"run", "--model", "../../testdata/golden/hub-bf16-sharded"}, 1, "no tokenizer"},
	} {
		code, _, stderr := runCLI(c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, c.args)
	}
}

func TestGenerateMatchesGolden(t *testing.T) {
	dir := filepath.Join(goldenRoot, "hub-bf16-sharded")
	var in struct {
		IDs      [][]int `json:"ids"`
		Generate struct {
			MaxNewTokens int     `json:"max_new_tokens"`
			NewIDs       [][]int `json:"new_ids"`
		} `json:"generate"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &in))
	ids, _ := json.Marshal(in.IDs[0])
	list := strings.Trim(string(ids), "[]")
	for _, be := range []string{"naive", defaultBackend()} {
		code, stdout, stderr := runCLI("generate", "--model", dir, "--ids", list, "--max-new-tokens",
			"10", "--greedy", "--backend", be, "--json")
		require.Equal(t, 0, code, stderr)
		var got []int
		require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
		assert.Equal(t, in.Generate.NewIDs[0], got, be)
	}
	code, _, stderr := runCLI("generate", "--model", dir, "--ids", "1,999")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "outside the vocabulary")
	code, _, stderr = runCLI("generate", "--ids", "1,x")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `"x"`)
	code, _, _ = runCLI("generate")
	assert.Equal(t, 2, code)
}

func TestTokenizeCommand(t *testing.T) {
	code, stdout, stderr := runCLI("tokenize", "--text", "Hello, world", "--json")
	require.Equal(t, 0, code, stderr)
	var ids []int
	require.NoError(t, json.Unmarshal([]byte(stdout), &ids))
	require.NotEmpty(t, ids)
	list, _ := json.Marshal(ids)
	code, stdout, _ = runCLI("tokenize", "--decode", strings.Trim(string(list), "[]"), "--json")
	require.Equal(t, 0, code)
	var s string
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	assert.Equal(t, "Hello, world", s)
	code, _, _ = runCLI("tokenize")
	assert.Equal(t, 2, code)
	code, _, stderr = runCLI("tokenize", "--tokenizer", "/nonexistent.json", "--text", "x")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "nonexistent")
}
