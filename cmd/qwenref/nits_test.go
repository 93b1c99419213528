package main

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tokenize takes -m DIR (its tokenizer.json), and a bad --decode is a
// usage error that names --decode.
func TestTokenizeModelAndDecodeErrors(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open("../../testdata/tokenizer/qwen3-tokenizer.json.gz")
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	data, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644))
	code, stdout, stderr := runCLI("tokenize", "-m", dir, "--text", "Hello", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "[9707]", strings.TrimSpace(stdout))

	code, _, stderr = runCLI("tokenize", "--decode", "a")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--decode: ")
	assert.NotContains(t, stderr, "--ids")
}

// --gpu's help names its default once, without flag's "(default -1)".
func TestGPUFlagHelp(t *testing.T) {
	_, stdout, _ := runCLI("run", "-h")
	i := strings.Index(stdout, "-gpu")
	require.GreaterOrEqual(t, i, 0, stdout)
	line := stdout[i : i+strings.Index(stdout[i:], "\n  -")+1]
	assert.NotContains(t, line, "(default -1)")
	assert.Contains(t, line, "$QWENREF_GPU")
}

// check --json prints one JSON object with every output's error and bar.
func TestCheckJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conv.safetensors")
	code, _, stderr := runCLI("golden", "--out", file, "--op", "conv", "--seq", "20")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := runCLI("check", file, "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Op      string `json:"op"`
		OK      bool   `json:"ok"`
		Outputs []struct {
			Name     string  `json:"name"`
			RelL2Tol float64 `json:"rel_l2_tol"`
			OK       bool    `json:"ok"`
		} `json:"outputs"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
	assert.Equal(t, "conv", r.Op)
	assert.True(t, r.OK)
	require.NotEmpty(t, r.Outputs)
	assert.Positive(t, r.Outputs[0].RelL2Tol)
}

// --model org/name names the snapshot's path once; the notes after it
// (no chat template, no tokenizer.json) name the checkpoint as typed.
func TestHubModelPathNamedOnce(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	commit := strings.Repeat("cd", 20)
	repo := filepath.Join(cache, "models--org--tiny")
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644))
	snap := filepath.Join(repo, "snapshots", commit)
	require.NoError(t, os.MkdirAll(filepath.Dir(snap), 0o755))
	code, _, stderr := runCLI("synth", "--shape", "tiny", "--out", snap)
	require.Equal(t, 0, code, stderr)
	withStdin(t, "", func() {
		code, _, stderr = runCLI("chat", "--model", "org/tiny", "-n", "1")
	})
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 1, strings.Count(stderr, commit), stderr)
	assert.Contains(t, stderr, "org/tiny ships no chat template")
}
