package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSynthTinyThenForward(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	code, stdout, stderr := runCLI("synth", "--shape", "tiny", "--layers", "4", "--out", dir, "--shard-gb", "0.004")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote")
	code, stdout, stderr = runCLI("generate", "--model", dir, "--ids", "1,2,3", "--max-new-tokens", "2", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^\[\d+,\d+\]\n$`, stdout)

	code, _, stderr = runCLI("synth", "--shape", "70b", "--out", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "unknown shape")
	code, _, stderr = runCLI("synth", "--shape", "tiny", "--out", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "the directory is not empty")
	code, _, _ = runCLI("synth")
	assert.Equal(t, 2, code)
}
