//go:build unix

package features

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A second run on a directory that a run is writing stops before it reads
// or writes anything there, and names the reason; once the first ends, the
// directory is free again. No lock file is left behind.
func TestRunRefusesADirectoryInUse(t *testing.T) {
	m, r := tiny(t)
	data := writeData(t, sampleLines...)
	out := t.TempDir()
	unlock, err := lockOut(out)
	require.NoError(t, err)
	_, err = Run(opts(m, r, data, out, "1"))
	assert.ErrorContains(t, err, "another qwenref features run is writing there")
	left, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Empty(t, left, "the refused run wrote into the directory")
	unlock()
	man, err := Run(opts(m, r, data, out, "1"))
	require.NoError(t, err)
	assert.True(t, man.Complete)
	left, err = os.ReadDir(out)
	require.NoError(t, err)
	for _, e := range left {
		assert.NotContains(t, e.Name(), "lock")
	}
}
