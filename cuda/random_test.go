package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// The cuda backend offers random-weight runners (what qwenref bench runs
// without --model): their logits equal NewRandomModel's for the same seed,
// prefill and decode, and closing one frees its device memory.
func TestRandomRunner(t *testing.T) {
	d := need(t)
	be, err := NewBackend()
	require.NoError(t, err)
	defer be.Close()
	require.True(t, model.HasRandomRunner(be))
	cfg := fewLayers(t, "27b", 4, 1024)
	t.Setenv(MaxTokensEnv, "256")
	free0, _, err := d.MemInfo()
	require.NoError(t, err)
	r, err := model.NewRandomRunner(be, cfg, 7, 1)
	require.NoError(t, err)
	gm, err := d.NewRandomModel(cfg, 7, 256)
	require.NoError(t, err)
	defer gm.Close()
	ids := []int{5, 900, 17, 3, 1000, 44, 2, 8}
	got, err := r.Forward([][]int{ids}, model.RunOptions{Logits: model.LastLogits})
	require.NoError(t, err)
	want, err := gm.Forward(ids, true)
	require.NoError(t, err)
	assert.Equal(t, want, got.Data, "prefill logits")
	got, err = r.Forward([][]int{{77}}, model.RunOptions{Logits: model.LastLogits})
	require.NoError(t, err)
	want, err = gm.Forward([]int{77}, true)
	require.NoError(t, err)
	assert.Equal(t, want, got.Data, "decode logits")
	assert.Equal(t, len(ids)+1, r.Pos())
	require.NoError(t, r.Close())
	require.NoError(t, gm.Close())
	free1, _, err := d.MemInfo()
	require.NoError(t, err)
	assert.InDelta(t, float64(free0), float64(free1), 64<<20, "device memory back after Close")

	// Shapes the device model cannot hold are refused, with the dims.
	small, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	_, err = model.NewRandomRunner(be, small, 7, 1)
	require.ErrorContains(t, err, "head dim")
}

// DeviceTime covers conv, gdn-core and gdn-layer at the 27B widths and
// nothing else.
func TestDeviceTime(t *testing.T) {
	d := need(t)
	cfg, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	for _, op := range []string{"conv", "gdn-core", "gdn-layer"} {
		med, lo, hi, runs, ok, err := Conv{d}.DeviceTime(op, cfg, 512)
		require.NoError(t, err, op)
		require.True(t, ok, op)
		assert.Greater(t, runs, 1, op)
		assert.True(t, lo > 0 && lo <= med && med <= hi, "%s: %v %v %v", op, lo, med, hi)
	}
	_, _, _, _, ok, err := Conv{d}.DeviceTime("attention-layer", cfg, 512)
	assert.NoError(t, err)
	assert.False(t, ok)
	small, err := model.ShapeConfig("0.8b")
	require.NoError(t, err)
	_, _, _, _, ok, _ = Conv{d}.DeviceTime("conv", small, 512)
	assert.False(t, ok, "the library's benchmarks build the 27B widths only")
}
