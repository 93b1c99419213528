package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const config27B = "../../testdata/configs/qwen3.5-27b.json"

func TestDoctorStubEnvironments(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	root, err := filepath.Abs("../../testdata/doctor/stubs")
	require.NoError(t, err)
	path := func(trees ...string) string {
		for i, tr := range trees {
			trees[i] = filepath.Join(root, tr)
		}
		return strings.Join(trees, string(os.PathListSeparator))
	}
	t.Setenv("PYTHONPATH", path("torch-cuda", "transformers-5.17", "fla", "causal-conv1d"))
	code, stdout, stderr := runCLI("doctor", "--model", config27B)
	if strings.Contains(stdout, "transformers   not installed") {
		t.Skip("python3 here does not honour PYTHONPATH")
	}
	require.Equal(t, 0, code, stderr+stdout)
	assert.Contains(t, stdout, "fast path: all 48 linear-attention layers of 64")

	t.Setenv("PYTHONPATH", path("torch-cuda", "transformers-5.17", "causal-conv1d"))
	code, stdout, stderr = runCLI("doctor")
	require.Equal(t, 4, code, stderr)
	assert.Contains(t, stdout, "pip install flash-linear-attention")
	assert.NotContains(t, stdout, "--no-build-isolation", "causal-conv1d is there")
}

func TestDoctorFailuresAndUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-python")
	code, _, stderr := runCLI("doctor", "--python", missing)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--python "+missing)

	code, stdout, _ := runCLI("doctor", "--python", missing, "--json")
	assert.Equal(t, 1, code)
	var r struct {
		Verdict string `json:"verdict"`
		Error   string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
	assert.Equal(t, "failed", r.Verdict)
	assert.Contains(t, r.Error, "no-python")

	code, _, stderr = runCLI("doctor", "--model", filepath.Join(t.TempDir(), "nowhere"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "nowhere")

	bad := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"model_type": "qwen3_5"}`), 0o600))
	code, _, stderr = runCLI("doctor", "--model", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "config")

	// org/name is read from the Hugging Face cache; only config.json needs to be there.
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	code, _, stderr = runCLI("doctor", "--python", missing, "--model", "Qwen/Qwen3.6-27B")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "not in the Hugging Face cache")
	commit := strings.Repeat("ab", 20)
	repo := filepath.Join(cache, "models--Qwen--Qwen3.6-27B")
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644))
	snap := filepath.Join(repo, "snapshots", commit)
	require.NoError(t, os.MkdirAll(snap, 0o755))
	cfg, err := os.ReadFile(config27B)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(snap, "config.json"), cfg, 0o644))
	code, _, stderr = runCLI("doctor", "--python", missing, "--model", "Qwen/Qwen3.6-27B")
	assert.Equal(t, 1, code, "the config resolved; the missing interpreter fails")
	assert.Contains(t, stderr, "from the Hugging Face cache")
	assert.Contains(t, stderr, "--python "+missing)

	code, _, _ = runCLI("doctor", "--timeout", "0s")
	assert.Equal(t, 2, code)
	code, _, _ = runCLI("doctor", "extra")
	assert.Equal(t, 2, code)
	code, stdout, _ = runCLI("help", "doctor")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "Exit status: 0 fast path available, 4")
}
