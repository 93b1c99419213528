package model

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// A forward pass records exactly Model.Stages, in order and with their
// shapes: on the tiny dense shape (Gated DeltaNet and attention layers),
// the tiny MoE shape and a qwen3_next model whose layer 1 is dense.
func TestModelStagesAreWhatForwardRecords(t *testing.T) {
	for name, cfg := range familyConfigs(t) {
		m, err := NewRandom(cfg, 3, false)
		require.NoError(t, err, name)
		be, err := ParseBackend("naive")
		require.NoError(t, err)
		var got []tensor.Stage
		rec := func(stage string, x *tensor.Tensor) {
			got = append(got, tensor.Stage{Name: stage, Shape: slices.Clone(x.Shape)})
		}
		ids := []int{1, 7, 2, 5, 0}
		_, err = m.NewSession().Forward(ids, be, Options{Record: rec})
		require.NoError(t, err, name)
		want := m.Stages(len(ids))
		require.Equal(t, len(want), len(got), "%s: recorded %v", name, got)
		for i, s := range want {
			assert.Equal(t, s.Name, got[i].Name, "%s: stage %d", name, i)
			assert.Equal(t, s.Shape, got[i].Shape, "%s: %s", name, s.Name)
			assert.Positive(t, s.Path.Amp, "%s: %s", name, s.Name)
		}
		for i, b := range m.Blocks {
			names := StageNames(b.Kind, b.MoE != nil)
			var blockNames []string
			for _, s := range b.Stages(len(ids)) {
				blockNames = append(blockNames, s.Name)
			}
			assert.Equal(t, names, blockNames, "%s: StageNames of layer %d", name, i)
		}
	}
}

// familyConfigs are small configs of the three families: the tiny dense
// shape (Gated DeltaNet and attention layers), the tiny MoE shape and a
// qwen3_next model whose layer 1 is dense.
func familyConfigs(t *testing.T) map[string]*Config {
	t.Helper()
	dense, err := ShapeConfig("tiny")
	require.NoError(t, err)
	dense.NumLayers, dense.LayerTypes, dense.VocabSize = 4, dense.LayerTypes[:4], 300
	require.NoError(t, dense.Validate())
	sparse, _ := tinyMoE(t)
	next, err := ParseConfig([]byte(nextConfigJSON))
	require.NoError(t, err)
	return map[string]*Config{"tiny": dense, "tiny-moe": sparse, "next": next}
}

// A block's paths chain through it: each mixer stage starts after the
// input RMSNorm, and the dense MLP adds H then I and two products.
func TestBlockStagePaths(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.NumLayers, cfg.LayerTypes, cfg.VocabSize = 4, cfg.LayerTypes[:4], 300
	m, err := NewRandom(cfg, 3, false)
	require.NoError(t, err)
	h, inter := cfg.HiddenSize, cfg.IntermediateSize
	for _, b := range m.Blocks {
		paths := map[string]tensor.StagePath{}
		for _, s := range b.Stages(9) {
			paths[s.Name] = s.Path
		}
		var mixer tensor.StagePath
		first := "qkv_proj"
		if b.Kind == FullAttention {
			mixer, first = b.Attn().Dims.OutputPath(9), "q_proj"
		} else {
			mixer = b.GDN().Dims.OutputPath(9)
		}
		assert.Equal(t, tensor.StagePath{Reduction: h, Amp: 1}, paths["mixer_in"])
		assert.Equal(t, tensor.StagePath{Reduction: 2 * h, Amp: 1, Products: 1}, paths[first])
		assert.Equal(t, tensor.StagePath{Reduction: h + mixer.Reduction, Amp: mixer.Amp, Products: mixer.Products}, paths["mixer_out"])
		want := tensor.StagePath{Reduction: 3*h + inter + mixer.Reduction, Amp: mixer.Amp, Products: mixer.Products + 2}
		assert.Equal(t, want, paths["mlp_out"])
		assert.Equal(t, want, paths["output"])
	}
}
