package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

func TestModelSpeed(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	m, err := model.NewRandom(cfg, 3, true)
	require.NoError(t, err)
	rs, err := ModelSpeed(m, SpeedOptions{Prompt: 16, Gen: 4, Reps: 3, Warmup: 1, Backends: []string{"chunked"}})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, []string{"pp16", "tg4"}, []string{rs[0].Test, rs[1].Test})
	for _, r := range rs {
		require.Len(t, r.SamplesTS, 3)
		mean, sd := meanSD(r.SamplesTS)
		assert.Equal(t, mean, r.AvgTS)
		assert.Equal(t, sd, r.StddevTS)
		assert.Equal(t, m.WeightBytes(), r.Size)
		assert.True(t, strings.HasSuffix(r.Model, " BF16"), r.Model)
	}
	var b bytes.Buffer
	require.NoError(t, WriteSpeedTable(&b, rs))
	lines := strings.Split(b.String(), "\n")
	assert.Contains(t, lines[2], "|            pp16 |")
	_, err = ModelSpeed(m, SpeedOptions{Reps: 1, Backends: []string{"chunked"}})
	assert.ErrorContains(t, err, "a pp or tg test")
}

// meanSD's deviation is the sample one (n − 1), as llama-bench's stdev.
func TestMeanSD(t *testing.T) {
	mean, sd := meanSD([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	assert.Equal(t, 5.0, mean)
	assert.InDelta(t, math.Sqrt(32.0/7), sd, 1e-12)
	_, sd = meanSD([]float64{3})
	assert.Zero(t, sd)
}

// The pp/tg results carry llama-bench's keys, in its order, in every
// format it writes: its JSON (stddev_ts, build_commit, cpu_info, n_depth,
// avg_ns and the samples), CSV with its header, and an object a line.
func TestWriteSpeedFormats(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	m, err := model.NewRandom(cfg, 3, true)
	require.NoError(t, err)
	rs, err := ModelSpeed(m, SpeedOptions{Prompt: 8, Gen: 2, Reps: 2, Backends: []string{"chunked"}, Filename: "dir"})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, WriteSpeed(&b, "json", rs))
	var objs []map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &objs))
	require.Len(t, objs, 2)
	for _, k := range []string{"build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type", "model_size",
		"model_n_params", "n_batch", "n_ubatch", "n_threads", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts"} {
		assert.Contains(t, objs[0], k)
	}
	assert.NotContains(t, objs[0], "stdev_ts")
	assert.Greater(t, objs[1]["avg_ns"], 0.0)
	assert.Equal(t, 2.0, objs[1]["n_gen"])

	b.Reset()
	require.NoError(t, WriteSpeed(&b, "csv", rs))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 3)
	assert.True(t, strings.HasPrefix(lines[0], "build_commit,build_number,cpu_info,gpu_info,backends,model_filename,model_type,"), lines[0])
	assert.True(t, strings.HasSuffix(lines[0], ",n_prompt,n_gen,n_depth,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts"), lines[0])
	assert.Contains(t, lines[1], ",chunked,dir,")

	b.Reset()
	require.NoError(t, WriteSpeed(&b, "jsonl", rs))
	lines = strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	for _, l := range lines {
		var o map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &o))
	}
	assert.Error(t, WriteSpeed(&b, "sql", rs))
}
