package model

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// A synthetic checkpoint loads (hub layout, several shards) into exactly
// the model NewRandom builds from the same seed.
func TestSyntheticCheckpointEqualsRandomModel(t *testing.T) {
	js, err := ShapeConfigJSON("tiny")
	require.NoError(t, err)
	cfg, err := ParseConfig(js)
	require.NoError(t, err)
	dir := t.TempDir()
	var last int64
	err = WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 11, ShardBytes: 4 << 20, Progress: func(done, total int64) {
		assert.GreaterOrEqual(t, done, last)
		last = done
	}})
	require.NoError(t, err)
	assert.Equal(t, SyntheticBytes(cfg), last)
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
	assert.Greater(t, len(shards), 1)

	disk, err := Load(dir)
	require.NoError(t, err)
	defer disk.Close()
	mem, err := NewRandom(cfg, 11, true)
	require.NoError(t, err)
	be, _ := ParseBackend("chunked")
	ids := []int{0, 151935, 42, 7}
	a, err := disk.NewSession().Forward(ids, be, Options{})
	require.NoError(t, err)
	b, err := mem.NewSession().Forward(ids, be, Options{})
	require.NoError(t, err)
	assert.Equal(t, b.Data, a.Data)

	// A second run into the same directory is refused.
	err = WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 11})
	assert.ErrorContains(t, err, "already holds a checkpoint")
}

func TestSyntheticFailureLeavesNothing(t *testing.T) {
	js, _ := ShapeConfigJSON("tiny")
	cfg, _ := ParseConfig(js)
	dir := t.TempDir()
	// Learn the shard names from a good run, then block the last shard's
	// path with a directory so its final rename fails.
	good := t.TempDir()
	require.NoError(t, WriteSynthetic(good, cfg, js, SynthOptions{Seed: 1, ShardBytes: 4 << 20}))
	shards, _ := filepath.Glob(filepath.Join(good, "model-*.safetensors"))
	require.Greater(t, len(shards), 1)
	blocker := filepath.Join(dir, filepath.Base(shards[len(shards)-1]))
	require.NoError(t, os.Mkdir(blocker, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(blocker, "x"), []byte("x"), 0o644))

	err := WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 1, ShardBytes: 4 << 20})
	require.Error(t, err)
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{filepath.Base(blocker)}, names, "earlier shards, temp files and config.json must be gone")
}

// Streaming (dropping each layer's pages after use) changes nothing but
// memory: the same calls give bit-identical logits.
func TestStreamingWeightsSameLogits(t *testing.T) {
	js, _ := ShapeConfigJSON("tiny")
	cfg, _ := ParseConfig(js)
	dir := t.TempDir()
	require.NoError(t, WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 5}))
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	be, _ := ParseBackend("chunked")
	ids := []int{9, 8, 7, 6, 5}
	run := func() []float32 {
		s := m.NewSession()
		a, err := s.Forward(ids[:3], be, Options{})
		require.NoError(t, err)
		b, err := s.Forward(ids[3:], be, Options{})
		require.NoError(t, err)
		return append(a.Data, b.Data...)
	}
	want := run()
	m.SetStreaming(true)
	got := run()
	require.Len(t, got, len(want))
	assert.Zero(t, tensor.MaxAbsDiff(got, want))
}
