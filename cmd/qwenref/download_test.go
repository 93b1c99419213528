package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/hub/hubtest"
	"github.com/qwenref/qwenref/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeHub serves the hub-layout golden checkpoint (with a tokenizer sized
// to it) as org/tiny, and points the hub environment at it and at a
// private cache.
func fakeHub(t *testing.T) (*hubtest.Server, *hubtest.Repo, string) {
	t.Helper()
	files, err := hubtest.Checkpoint(filepath.Join(goldenRoot, "hub-bf16-sharded"))
	require.NoError(t, err)
	repo := &hubtest.Repo{ID: "org/tiny", Files: files}
	srv := hubtest.NewServer(repo)
	t.Cleanup(srv.Close)
	cache := filepath.Join(t.TempDir(), "hub")
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("TRANSFORMERS_OFFLINE", "")
	return srv, repo, cache
}

// From nothing to text: download into the cache, then run, generate and
// forward by repo id, offline.
func TestDownloadThenRunByRepoID(t *testing.T) {
	_, repo, cache := fakeHub(t)
	code, stdout, stderr := runCLI("download", "org/tiny")
	require.Equal(t, 0, code, stderr)
	snap := filepath.Join(cache, "models--org--tiny", "snapshots", repo.Commit)
	assert.Equal(t, snap+"\n", stdout, "stdout is the snapshot directory only")
	assert.Contains(t, stderr, "run it with: qwenref run --model org/tiny")
	assert.NotContains(t, stderr, "\r", "no progress bar off a terminal")
	assert.NoFileExists(t, filepath.Join(snap, "preprocessor_config.json"))

	t.Setenv("HF_HUB_OFFLINE", "1") // resolution never needs the network
	code, stdout, stderr = runCLI("run", "--model", "org/tiny", "--prompt", "hello world", "--max-new-tokens", "3", "--compare", "none")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "model: org/tiny@main from the Hugging Face cache, "+snap)
	assert.NotEmpty(t, strings.TrimSpace(stdout))

	code, stdout, stderr = runCLI("generate", "--model", "org/tiny@"+repo.Commit, "--ids", "1,2,3", "--max-new-tokens", "2", "--greedy", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^\[\d+,\d+\]`, stdout)

	// The download again: everything is cached, offline refuses.
	code, _, stderr = runCLI("download", "org/tiny")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "HF_HUB_OFFLINE is set")
	t.Setenv("HF_HUB_OFFLINE", "")
	code, _, stderr = runCLI("download", "org/tiny", "--revision", "main")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "0 B fetched")
}

func TestDownloadLocalDirThenRun(t *testing.T) {
	fakeHub(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	code, stdout, stderr := runCLI("download", "--local-dir", dir, "org/tiny")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, dir+"\n", stdout)
	code, _, stderr = runCLI("run", "--model", dir, "--prompt", "abc", "--max-new-tokens", "2", "--compare", "none")
	require.Equal(t, 0, code, stderr)
}

func TestDownloadErrors(t *testing.T) {
	srv, _, _ := fakeHub(t)
	gated, err := hubtest.Checkpoint(filepath.Join(goldenRoot, "hub-bf16-sharded"))
	require.NoError(t, err)
	srv.Add(&hubtest.Repo{ID: "org/gated", Files: gated, Gated: true, Token: "hf_ok"})
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"download"}, 2, "missing the repository"},
		{[]string{"download", "not-a-repo"}, 2, "not a Hugging Face repo id"},
		{[]string{"download", "org/tiny", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"download", "org/tiny@v1", "--revision", "v2"}, 2, "--revision says v2"},
		{[]string{"download", "org/tiny", "--revision", "nosuch"}, 1, `revision "nosuch" does not exist in org/tiny (HTTP 404 RevisionNotFound`},
		{[]string{"download", "org/gated"}, 1, "org/gated is a gated repository (HTTP 401 GatedRepo"},
		{[]string{"download", "org/absent"}, 1, "org/absent was not found, or it is private or gated and needs a token"},
		{[]string{"download", "org/tiny", "--include", "*.gguf"}, 1, "matches the include patterns"},
		{[]string{"run", "--model", "org/tiny", "--prompt", "x"}, 1, "fetch it with: qwenref download org/tiny"},
		{[]string{"run", "--model", "org/tiny@v2", "--prompt", "x"}, 1, "qwenref download org/tiny --revision v2"},
		{[]string{"run", "--model", "./no/such/dir", "--prompt", "x"}, 1, "no such directory, nor a Hugging Face repo id"},
		{[]string{"forward", "--model", "org/absent", "--ids-json", "x.json", "--out", "y.safetensors"}, 1, "is not in the Hugging Face cache"},
	} {
		code, _, stderr := runCLI(c.args...)
		assert.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, c.args)
	}
	// Usage errors are one line, flags before or after the repo id; -h is help on stdout.
	for _, args := range [][]string{{"--bogus", "org/tiny"}, {"org/tiny", "--bogus"}, {"org/tiny", "extra"}, {"--threads", "-5", "org/tiny"}} {
		code, _, stderr := runCLI(append([]string{"download"}, args...)...)
		assert.Equal(t, 2, code, "%v: %s", args, stderr)
		assert.Equal(t, 0, strings.Count(strings.TrimSpace(stderr), "\n"), "%v: one line, got %q", args, stderr)
	}
	code, stdout, stderr := runCLI("check", "-t", "0", "/nonexistent/golden.safetensors") // a short flag before the positional
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "/nonexistent/golden.safetensors")
	code, stdout, stderr = runCLI("download", "org/tiny", "-h")
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "Usage: qwenref download")
	// Credentials in HF_ENDPOINT are never printed: not in the first line,
	// not in an error.
	secret := "hf_" + strings.Repeat("Secret9", 5)
	t.Setenv("HF_ENDPOINT", strings.Replace(srv.URL, "://", "://user:"+secret+"@", 1))
	code, _, stderr = runCLI("download", "org/gated")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "Accept its terms at http://user:xxxxx@")
	assert.NotContains(t, stderr, secret)
	t.Setenv("HF_ENDPOINT", srv.URL)
	t.Setenv("HF_TOKEN", "hf_ok")
	code, _, stderr = runCLI("download", "org/gated")
	assert.Equal(t, 0, code, stderr)
}

// A path that exists wins over a repo id of the same spelling.
func TestModelPathWinsOverRepoID(t *testing.T) {
	fakeHub(t)
	wd := t.TempDir()
	t.Chdir(wd)
	require.NoError(t, os.MkdirAll(filepath.Join("org", "tiny"), 0o755))
	dir, err := model.ResolveModel("org/tiny", &strings.Builder{})
	require.NoError(t, err)
	assert.Equal(t, "org/tiny", dir)
	dir, err = model.ResolveModel("", &strings.Builder{})
	require.NoError(t, err)
	assert.Empty(t, dir)
}
