package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/qwenref/qwenref/weights"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFeaturesThenCheck captures a synth checkpoint's features, checks
// them (exit 0), zeroes a shard's features (exit 4, named) and refuses bad
// flags (exit 2).
func TestFeaturesThenCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	code, _, stderr := runCLI("synth", "--shape", "tiny", "--layers", "4", "--out", dir)
	require.Equal(t, 0, code, stderr)
	data := filepath.Join(t.TempDir(), "d.jsonl")
	require.NoError(t, os.WriteFile(data, []byte("{\"ids\":[1,2,3,4]}\n{\"text\":\"Hello there.\"}\n"), 0o644))
	out := filepath.Join(t.TempDir(), "f")
	code, stdout, stderr := runCLI("features", "--model", dir, "--data", data, "--out", out, "--layers", "1,final_norm", "--validate", "2", "--validate-backend", "chunked")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "features: 2 samples")
	assert.Contains(t, stdout, "all holds")
	assert.Contains(t, stderr, "tok/s")

	shard := filepath.Join(out, "shard-00000.safetensors")
	s, err := weights.Open(shard)
	require.NoError(t, err)
	ids, _, err := s.Float32("input_ids")
	require.NoError(t, err)
	f, shape, err := s.Float32("features")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	clear(f)
	require.NoError(t, weights.WriteFile(shard, []weights.NamedTensor{
		{Name: "features", DType: "BF16", Shape: shape, Data: f},
		{Name: "input_ids", DType: "I64", Shape: []int{len(ids)}, Data: ids},
		{Name: "loss_mask", DType: "I64", Shape: []int{len(ids)}, Data: make([]float32, len(ids))},
		{Name: "offsets", DType: "I64", Shape: []int{3}, Data: []float32{0, 4, float32(len(ids))}},
		{Name: "sample_index", DType: "I64", Shape: []int{2}, Data: []float32{0, 1}},
	}, nil))
	code, stdout, _ = runCLI("features", "check", out, "--model", dir)
	assert.Equal(t, 4, code)
	assert.Contains(t, stdout, "layer 1: all zero")

	for _, bad := range [][]string{{"features", "--model", dir}, {"features", "--model", dir, "--data", data, "--out", out, "--layers", "9"}, {"features", "check"}} {
		code, _, _ = runCLI(bad...)
		assert.Equal(t, 2, code, bad)
	}
}
