package hub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCacheDirPrecedence(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HF_HOME", "")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	assert.Equal(t, "/home/u/.cache/huggingface/hub", CacheDir())
	assert.Equal(t, "/home/u/.cache/huggingface/token", TokenPath())
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	assert.Equal(t, "/xdg/huggingface/hub", CacheDir())
	t.Setenv("HF_HOME", "~/hf")
	assert.Equal(t, "/home/u/hf/hub", CacheDir())
	assert.Equal(t, "/home/u/hf/token", TokenPath())
	t.Setenv("HUGGINGFACE_HUB_CACHE", "/legacy")
	assert.Equal(t, "/legacy", CacheDir())
	t.Setenv("HF_HUB_CACHE", "/hubcache")
	assert.Equal(t, "/hubcache", CacheDir())
	t.Setenv("HF_TOKEN_PATH", "/tok")
	assert.Equal(t, "/tok", TokenPath())
}

func TestOfflineValues(t *testing.T) {
	t.Setenv("TRANSFORMERS_OFFLINE", "")
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "yes": true, "ON": true, "True": true, "no": false} {
		t.Setenv("HF_HUB_OFFLINE", v)
		assert.Equal(t, want, Offline(), v)
	}
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("TRANSFORMERS_OFFLINE", "1")
	assert.True(t, Offline())
	t.Setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
	assert.True(t, ProgressDisabled())
}

func TestTokenSources(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(dir, "token"))
	tok, src := Token()
	assert.Empty(t, tok)
	assert.Empty(t, src)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("hf_file\n"), 0o600))
	tok, src = Token()
	assert.Equal(t, "hf_file", tok)
	assert.Equal(t, filepath.Join(dir, "token"), src)
	t.Setenv("HF_TOKEN", "hf_env")
	tok, src = Token()
	assert.Equal(t, "hf_env", tok)
	assert.Equal(t, "HF_TOKEN", src)
}

func TestParseRef(t *testing.T) {
	repo, rev, err := ParseRef("Qwen/Qwen3.5-0.8B")
	require.NoError(t, err)
	assert.Equal(t, "Qwen/Qwen3.5-0.8B", repo)
	assert.Equal(t, "main", rev)
	_, rev, err = ParseRef("Qwen/Qwen3.5-0.8B@refs/pr/1")
	require.NoError(t, err)
	assert.Equal(t, "refs/pr/1", rev)
	assert.Equal(t, "models--Qwen--Qwen3.5-0.8B", RepoFolder(repo))
	for _, bad := range []string{"Qwen", "a/b/c", "./x", "../x", "a/b@", "a/b@../../etc", "a--b/c", "/abs/path", "a/b@/x", "a/.b"} {
		_, _, err := ParseRef(bad)
		assert.Error(t, err, bad)
		assert.False(t, LooksLikeRepoID(bad), bad)
	}
}

// fakeSnapshot lays out one file the way huggingface_hub does.
func fakeSnapshot(t *testing.T, cache, repo, ref, commit string) string {
	t.Helper()
	storage := filepath.Join(cache, RepoFolder(repo))
	blob := filepath.Join(storage, "blobs", "abc123")
	require.NoError(t, os.MkdirAll(filepath.Dir(blob), 0o755))
	require.NoError(t, os.WriteFile(blob, []byte("{}"), 0o644))
	snap := filepath.Join(storage, "snapshots", commit)
	require.NoError(t, os.MkdirAll(snap, 0o755))
	require.NoError(t, os.Symlink("../../blobs/abc123", filepath.Join(snap, "config.json")))
	if ref != "" {
		require.NoError(t, os.MkdirAll(filepath.Join(storage, "refs"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(storage, "refs", ref), []byte(commit), 0o644))
	}
	return snap
}

func TestResolve(t *testing.T) {
	cache := t.TempDir()
	commit := strings.Repeat("a", 40)
	snap := fakeSnapshot(t, cache, "org/m", "main", commit)

	got, err := Resolve(cache, "org/m", "main")
	require.NoError(t, err)
	assert.Equal(t, snap, got)
	got, err = Resolve(cache, "org/m", commit)
	require.NoError(t, err)
	assert.Equal(t, snap, got)

	var nc *NotCachedError
	_, err = Resolve(cache, "org/other", "main")
	require.ErrorAs(t, err, &nc)
	assert.Contains(t, err.Error(), cache)
	assert.Contains(t, err.Error(), "no models--org--other folder")
	assert.Contains(t, err.Error(), "qwenref download org/other")

	_, err = Resolve(cache, "org/m", "v2")
	require.ErrorAs(t, err, &nc)
	assert.Contains(t, err.Error(), "no refs/v2")
	assert.Contains(t, err.Error(), "qwenref download org/m --revision v2")

	_, err = Resolve(cache, "org/m", strings.Repeat("b", 40))
	require.ErrorAs(t, err, &nc)
	assert.Contains(t, err.Error(), "no snapshots/bbbb")

	// A ref that does not hold a hash, and a snapshot whose blob is gone.
	require.NoError(t, os.WriteFile(filepath.Join(cache, RepoFolder("org/m"), "refs", "bad"), []byte("garbage"), 0o644))
	_, err = Resolve(cache, "org/m", "bad")
	assert.ErrorContains(t, err, "not a 40-hex commit hash")
	require.NoError(t, os.Remove(filepath.Join(cache, RepoFolder("org/m"), "blobs", "abc123")))
	_, err = Resolve(cache, "org/m", "main")
	require.Error(t, err)
	assert.False(t, errors.As(err, &nc))
	assert.Contains(t, err.Error(), "../../blobs/abc123, which is missing")
}

func TestMatcher(t *testing.T) {
	m, err := NewMatcher(nil)
	require.NoError(t, err)
	for name, want := range map[string]bool{
		"config.json": true, "generation_config.json": true, "tokenizer.json": true, "tokenizer_config.json": true,
		"chat_template.jinja": true, "model.safetensors": true, "model-00001-of-00002.safetensors": true,
		"model.safetensors.index.json": true, "preprocessor_config.json": false, "video_preprocessor_config.json": false,
		"README.md": false, "pytorch_model.bin": false, "sub/model.safetensors": false,
	} {
		assert.Equal(t, want, m.Match(name), name)
	}
	m, err = NewMatcher([]string{"*.json", "sub/", "model-0000[12]-*", "[!a-y]*.txt"})
	require.NoError(t, err)
	for name, want := range map[string]bool{
		"config.json": true, "a/b.json": true, "sub/x.bin": true, "model-00002-of-3": true, "model-00003-of-3": false,
		"z.txt": true, "b.txt": false, "model.safetensors": false, "模型-1.json": true,
	} {
		assert.Equal(t, want, m.Match(name), name)
	}
	m, err = NewMatcher([]string{"模型-?.bin"})
	require.NoError(t, err)
	assert.True(t, m.Match("模型-1.bin"), "multi-byte literals survive the translation")
	assert.False(t, m.Match("模型-12.bin"))
	_, err = NewMatcher([]string{""})
	assert.ErrorContains(t, err, "empty pattern")
}

// A snapshot whose index names a shard that is not there (an interrupted
// Python download writes refs first) is refused with the shard named.
func TestResolveIncompleteShards(t *testing.T) {
	cache := t.TempDir()
	commit := strings.Repeat("c", 40)
	snap := fakeSnapshot(t, cache, "org/m", "main", commit)
	index := `{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`
	require.NoError(t, os.WriteFile(filepath.Join(snap, "model.safetensors.index.json"), []byte(index), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(snap, "model-00001-of-00002.safetensors"), nil, 0o644))
	_, err := Resolve(cache, "org/m", "main")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of the 2 shards its index names are missing (model-00002-of-00002.safetensors)")
	assert.Contains(t, err.Error(), "run qwenref download org/m")
	require.NoError(t, os.WriteFile(filepath.Join(snap, "model-00002-of-00002.safetensors"), nil, 0o644))
	_, err = Resolve(cache, "org/m", "main")
	assert.NoError(t, err)
}

func TestIsTerminalRefusesAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	assert.False(t, IsTerminal(w))
	assert.Equal(t, "1.8 MB", FormatBytes(1814434))
	assert.Equal(t, "55.56 GB", FormatBytes(55_560_000_000))
}
