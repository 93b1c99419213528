package model

import (
	"os"
	"path/filepath"
	"strings"
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

// Every named shape takes every layer count, in its own config form (the
// hub form nests the text keys under text_config, Qwen3-Next's is flat):
// the count lands where the family reads it, the width stays, and the
// text written parses to the config returned. A count whose experts
// exceed the limit is refused by name, never a panic.
func TestShapeConfigJSONLayersEveryShape(t *testing.T) {
	for _, name := range ShapeNames() {
		full, err := ShapeConfig(name)
		require.NoError(t, err)
		for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 8, full.NumLayers, full.NumLayers + 1, MaxLayers} {
			js, cfg, err := ShapeConfigJSONLayers(name, n)
			if err != nil {
				assert.ErrorContains(t, err, "num_experts × sparse layers", "%s --layers %d", name, n)
				continue
			}
			want := n
			if n == 0 {
				want = full.NumLayers
			}
			assert.Equal(t, want, cfg.NumLayers, "%s --layers %d", name, n)
			assert.Len(t, cfg.LayerTypes, want)
			assert.Equal(t, full.LayerTypes[:min(want, full.NumLayers)], cfg.LayerTypes[:min(want, full.NumLayers)], "%s: the pattern stays", name)
			assert.Equal(t, full.HiddenSize, cfg.HiddenSize)
			assert.Equal(t, full.ModelType, cfg.ModelType)
			assert.Equal(t, full.MoE.NumExperts, cfg.MoE.NumExperts)
			again, err := ParseConfig(js)
			require.NoError(t, err, "%s --layers %d", name, n)
			assert.Equal(t, cfg, again)
		}
	}
	for _, n := range []int{-1, MaxLayers + 1} {
		_, _, err := ShapeConfigJSONLayers("80b-a3b", n)
		assert.ErrorContains(t, err, "want 0 (all) to")
	}
}

// A flat config with its own layer_types and mlp_only_layers keeps both
// consistent with the new count.
func TestWithLayersCutsLists(t *testing.T) {
	js, err := ShapeConfigJSON("80b-a3b")
	require.NoError(t, err)
	js = []byte(strings.Replace(string(js), `"mlp_only_layers":[]`,
		`"mlp_only_layers":[0,5],"layer_types":["linear_attention","full_attention","linear_attention","linear_attention","linear_attention","full_attention"]`, 1))
	js = []byte(strings.Replace(string(js), `"num_hidden_layers":48`, `"num_hidden_layers":6`, 1))
	_, err = ParseConfig(js)
	require.NoError(t, err)
	cut, err := withLayers(js, 2)
	require.NoError(t, err)
	cfg, err := ParseConfig(cut)
	require.NoError(t, err)
	assert.Equal(t, []LayerKind{LinearAttention, FullAttention}, cfg.LayerTypes)
	assert.Equal(t, []int{0}, cfg.MoE.MLPOnlyLayers)
	assert.Contains(t, string(cut), `"rms_norm_eps": 1e-6`, "numbers keep their text")
}

// A link to a directory is named as the link it is, with the directory to
// give instead; a file says what it is.
func TestCheckSyntheticOutNamesLinks(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "real")
	require.NoError(t, os.Mkdir(dir, 0o755))
	link := filepath.Join(parent, "link")
	require.NoError(t, os.Symlink(dir, link))
	assert.ErrorContains(t, CheckSyntheticOut(link), "--out "+link+" is a symbolic link to the directory "+dir+": name that directory itself")
	require.NoError(t, CheckSyntheticOut(dir))
	dangling := filepath.Join(parent, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(parent, "nowhere"), dangling))
	assert.ErrorContains(t, CheckSyntheticOut(dangling), "is a symbolic link: name a new or empty directory")
	file := filepath.Join(parent, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	assert.ErrorContains(t, CheckSyntheticOut(file), "exists and is a regular file, not a directory")
}
