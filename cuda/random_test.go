package cuda

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// The cuda backend offers random-weight runners (what qwenref bench runs
// without --model): their logits equal newRandomModel's for the same seed,
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
	gm, err := d.newRandomModel(cfg, 7, 256, false)
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
	// A step into the caller's buffer (RunOptions.Out, as generation runs).
	out := &tensor.Tensor{}
	for _, id := range []int{78, 3, 901} {
		got, err = r.Forward([][]int{{id}}, model.RunOptions{Logits: model.LastLogits, Out: out})
		require.NoError(t, err)
		assert.Same(t, out, got)
		want, err = gm.Forward([]int{id}, true)
		require.NoError(t, err)
		assert.Equal(t, want, got.Data, "decode logits into Out")
	}
	assert.Equal(t, len(ids)+4, r.Pos())
	// Each call's device time (what qwenref bench reports for cuda).
	dt, ok := r.(interface{ LastDeviceTime() (time.Duration, bool) })
	require.True(t, ok, "the device runner reports device time")
	d1, ok := dt.LastDeviceTime()
	assert.True(t, ok)
	assert.Greater(t, d1, time.Duration(0))
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

// DeviceTime covers conv, gdn-core and gdn-layer at the 27B widths, and
// attention-layer at the widths of any shape the device model runs; it
// says why for those ops at other shapes, and offers nothing for others.
func TestDeviceTime(t *testing.T) {
	d := need(t)
	cfg, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	small, err := model.ShapeConfig("0.8b")
	require.NoError(t, err)
	timed := func(op string, cfg *model.Config) {
		tm, err := DeviceTime(d, op, cfg, 512)
		require.NoError(t, err, op)
		require.NotNil(t, tm, op)
		assert.Greater(t, tm.Runs, 1, op)
		assert.True(t, tm.Min > 0 && tm.Min <= tm.Median && tm.Median <= tm.Max, "%s: %+v", op, tm)
	}
	for _, op := range []string{"conv", "gdn-core", "gdn-layer", "attention-layer"} {
		timed(op, cfg)
	}
	timed("attention-layer", small) // the model's own mixer: any width it runs
	tm, err := DeviceTime(d, "mlp", cfg, 512)
	assert.NoError(t, err)
	assert.Nil(t, tm)
	_, err = DeviceTime(d, "conv", small, 512)
	assert.ErrorIs(t, err, model.ErrUnsupportedShape, "the library's GDN benchmarks build the 27B widths only")
	assert.ErrorContains(t, err, "27B's widths")
	tiny, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	_, err = DeviceTime(d, "attention-layer", tiny, 64)
	assert.ErrorIs(t, err, model.ErrUnsupportedShape, "head dims the device model does not run")
}

// The one-layer model a mixer benchmark builds is a valid config of the
// same widths, for every shape the device model runs (no GPU needed).
func TestOneLayerConfig(t *testing.T) {
	for _, name := range []string{"27b", "0.8b"} {
		cfg, err := model.ShapeConfig(name)
		require.NoError(t, err)
		require.NoError(t, SupportsResident(cfg), name)
		layers := cfg.NumLayers
		one := oneLayer(cfg, model.FullAttention)
		dims, kinds, err := dimsOf(one, 512)
		require.NoError(t, err, name)
		assert.Equal(t, []int32{1}, kinds, name)
		assert.Equal(t, int32(cfg.HiddenSize), dims.hidden, name)
		assert.Equal(t, int32(cfg.NumHeads), dims.nh, name)
		assert.Equal(t, layers, cfg.NumLayers, "the shape itself is left alone")
	}
}

// The cuda kernels and device say what they are without a GPU: the bf16
// ones report it, and each refusal of a shape wraps
// model.ErrUnsupportedShape and names the dims.
func TestKernelsDescribeThemselves(t *testing.T) {
	assert.Equal(t, model.PrecisionBF16, MatMul{}.Precision())
	assert.Equal(t, model.PrecisionF32, MatMulF32{}.Precision())
	assert.Equal(t, model.PrecisionBF16, GatedDelta{Variant: Auto}.Precision())
	assert.Equal(t, model.PrecisionF32, GatedDelta{Variant: Recurrent}.Precision())
	big, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	tiny, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	for _, v := range []GDNVariant{Auto, ChunkBF16, ChunkF32, Recurrent} {
		assert.NoError(t, GatedDelta{Variant: v}.Supports(big), v)
	}
	assert.ErrorIs(t, GatedDelta{Variant: ChunkBF16}.Supports(tiny), model.ErrUnsupportedShape)
	assert.ErrorContains(t, GatedDelta{Variant: Auto}.Supports(tiny), "the fp32 SIMT chunked kernel runs instead")
	assert.NoError(t, GatedDelta{Variant: ChunkF32}.Supports(tiny))
	assert.NoError(t, SupportsResident(big))
	err = SupportsResident(tiny)
	assert.ErrorIs(t, err, model.ErrUnsupportedShape)
	assert.ErrorContains(t, err, fmt.Sprintf("this shape has %d/%d and %d", tiny.LinearKeyHeadDim, tiny.LinearValueHeadDim, tiny.HeadDim))
	wide := *big
	wide.HeadDim = 512
	assert.ErrorContains(t, Attention{}.Supports(&wide), "head dims up to 256, not 512")
	assert.NoError(t, Attention{}.Supports(big))
}
