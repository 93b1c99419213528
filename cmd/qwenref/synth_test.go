package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSynthTinyThenForward(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	code, stdout, stderr := runCLI("synth", "--shape", "tiny", "--layers", "4", "--out", dir, "--shard-gb", "0.004")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote")
	assert.NotContains(t, stderr, "\r", "progress redraws a line on a terminal only, not in files and pipes")
	code, stdout, stderr = runCLI("generate", "--model", dir, "--ids", "1,2,3", "--max-new-tokens", "2", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^\[\d+,\d+\]\n$`, stdout)

	// A target under one byte: a tensor a shard, not one shard of all.
	tinyShards := filepath.Join(t.TempDir(), "ck")
	code, _, stderr = runCLI("synth", "--shape", "tiny", "--layers", "1", "--out", tinyShards, "--shard-gb", "1e-12")
	require.Equal(t, 0, code, stderr)
	shards, err := filepath.Glob(filepath.Join(tinyShards, "*.safetensors"))
	require.NoError(t, err)
	assert.Greater(t, len(shards), 10, "one tensor a shard")

	code, _, stderr = runCLI("synth", "--shape", "70b", "--out", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "unknown shape")
	code, _, stderr = runCLI("synth", "--shape", "tiny", "--out", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "the directory is not empty")
	code, _, _ = runCLI("synth")
	assert.Equal(t, 2, code)
	// Bad flags are usage errors: exit 2, one line naming the flag.
	for _, c := range [][]string{{"--layers", "-1"}, {"--shard-gb", "NaN"}, {}} {
		args := append([]string{"synth", "--shape", "tiny"}, c...)
		if len(c) > 0 {
			args = append(args, "--out", filepath.Join(t.TempDir(), "new"))
		}
		code, _, stderr = runCLI(args...)
		assert.Equal(t, 2, code, "%v: %s", c, stderr)
		assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "%v: one line, got %q", c, stderr)
	}
}

// synth writes through a staging directory: a stale one from a killed run
// is removed, a non-empty --out is refused untouched, and an empty one is
// replaced by the checkpoint.
func TestSynthStagingAndOut(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "ck")
	stale := filepath.Join(parent, ".ck.qwenref-tmp-999999999-1")
	require.NoError(t, os.Mkdir(stale, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(stale, "model-00001-of-00002.safetensors"), []byte("partial"), 0o644))
	require.NoError(t, os.Mkdir(out, 0o755)) // empty: accepted
	code, _, stderr := runCLI("synth", "--shape", "tiny", "--layers", "4", "--out", out, "--shard-gb", "0.004")
	require.Equal(t, 0, code, stderr)
	_, err := os.Stat(stale)
	assert.ErrorIs(t, err, os.ErrNotExist, "the stale staging directory is removed")
	es, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, es, 1, "only the checkpoint is left")
	_, err = os.Stat(filepath.Join(out, "config.json"))
	require.NoError(t, err)

	notEmpty := filepath.Join(parent, "busy")
	require.NoError(t, os.Mkdir(notEmpty, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(notEmpty, "keep.txt"), []byte("mine"), 0o644))
	code, _, stderr = runCLI("synth", "--shape", "tiny", "--layers", "4", "--out", notEmpty)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `not empty (it holds "keep.txt")`)
	es, _ = os.ReadDir(notEmpty)
	assert.Len(t, es, 1)
	file := filepath.Join(parent, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	code, _, stderr = runCLI("synth", "--shape", "tiny", "--out", file)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "exists and is a regular file, not a directory")
	es, _ = os.ReadDir(parent)
	assert.Len(t, es, 3, "no staging directory is left behind")
}
