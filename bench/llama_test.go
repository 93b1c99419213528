package bench

import (
	"bytes"
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
		assert.Equal(t, sd, r.StdevTS)
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
