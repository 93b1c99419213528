package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A restored session continues bit for bit as a fresh one fed the same
// tokens in the same calls; a snapshot the session went back behind is refused.
func TestSessionSnapshotRestore(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 64
	m, err := NewRandom(cfg, 3, false)
	require.NoError(t, err)
	be, _ := ParseBackend("chunked")
	a, b, c := []int{1, 2, 3, 4, 5}, []int{6, 7, 8}, []int{9, 10}
	s := m.NewSession()
	_, err = s.Forward(a, be, Options{NoLogits: true})
	require.NoError(t, err)
	atA := s.Snapshot()
	assert.Equal(t, len(a), atA.Pos())
	assert.Positive(t, atA.Bytes())
	_, err = s.Forward(b, be, Options{NoLogits: true})
	require.NoError(t, err)
	atB := s.Snapshot()

	require.NoError(t, s.Restore(atA))
	assert.Equal(t, len(a), s.Pos())
	got, err := s.Forward(c, be, Options{})
	require.NoError(t, err)
	fresh := m.NewSession()
	_, err = fresh.Forward(a, be, Options{NoLogits: true})
	require.NoError(t, err)
	want, err := fresh.Forward(c, be, Options{})
	require.NoError(t, err)
	assert.Equal(t, want.Data, got.Data, "restore, then c: bit for bit a fresh session fed a, then c")

	assert.ErrorIs(t, s.Restore(atB), errStale, "atB's attention rows were overwritten by c")
	require.NoError(t, s.Restore(atA), "atA is still valid: nothing before it changed")
	s.Reset()
	assert.ErrorIs(t, s.Restore(atA), errStale)
	assert.ErrorContains(t, m.NewSession().Restore(atA), "another session")
}
