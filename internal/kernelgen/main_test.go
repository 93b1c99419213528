package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The committed generated files are what the generators write now, byte
// for byte, and every package's generators write at least one .s file.
func TestCommittedFilesAreCurrent(t *testing.T) {
	for pkg := range generators {
		files, err := generate(pkg)
		require.NoError(t, err, pkg)
		asm := 0
		for name, want := range files {
			if filepath.Ext(name) == ".s" {
				asm++
			}
			got, err := os.ReadFile(filepath.Join("..", "..", pkg, name))
			require.NoError(t, err, "%s/%s", pkg, name)
			assert.True(t, bytes.Equal(got, want), "%s/%s differs from what kernelgen writes: run go generate ./%s", pkg, name, pkg)
		}
		assert.Positive(t, asm, pkg)
	}
}

// run writes a package's files into its directory, and only there.
func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layers", "conv1d")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, run([]string{"layers/conv1d"}, dir))
	want, err := generate("layers/conv1d")
	require.NoError(t, err)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, len(want), "no temporary file is left")
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, b, got, name)
	}

	assert.ErrorContains(t, run(nil, dir), "want one argument")
	assert.ErrorContains(t, run([]string{"layers/conv1d", "linalg"}, dir), "want one argument")
	assert.ErrorContains(t, run([]string{"layers/norm"}, dir), "no generators for")
	assert.ErrorContains(t, run([]string{"linalg"}, dir), "is not linalg's directory")
	assert.ErrorContains(t, run([]string{"layers/attention"}, filepath.Join(t.TempDir(), "notlayers", "attention")),
		"is not layers/attention's directory")
}
