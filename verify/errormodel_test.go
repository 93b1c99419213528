package verify

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

const goldenRoot = "../testdata/golden"

// densePath is the error model of a dense decoder layer written out from
// the model's config, as docs/tolerances.md states it: the path of stage
// from the layer input for T tokens. The layers' own stage lists must
// reproduce it.
func densePath(cfg *model.Config, kind model.LayerKind, stage string, t int) tensor.StagePath {
	p := func(n int, amp float64, products int) tensor.StagePath {
		return tensor.StagePath{Reduction: n, Amp: amp, Products: products}
	}
	h, inter := cfg.HiddenSize, cfg.IntermediateSize
	proj := 2 * h // the input RMSNorm's sum, then the projection's dot product
	if kind == model.FullAttention {
		d := cfg.HeadDim
		core := proj + d + d + t // q/k norm, q·k, the softmax sum over T keys
		mixer := core + cfg.NumHeads*d
		switch stage {
		case "input":
			return p(0, 1, 0)
		case "mixer_in":
			return p(h, 1, 0)
		case "q_proj", "k_proj", "v_proj":
			return p(proj, 1, 1)
		case "q_rope", "k_rope":
			return p(proj+d, 1, 1)
		case "attn_core", "gated":
			return p(core, 1, 1)
		case "mixer_out":
			return p(mixer, 1, 2)
		case "mlp_in":
			return p(mixer+h, 1, 2)
		}
		return p(mixer+proj+inter, 1, 4)
	}
	k, dk, dv := cfg.LinearConvKernel, cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	core := proj + k + dk + t*dk // conv taps, the L2 norm, T rank-one updates
	mixer := core + dv + cfg.LinearNumValueHeads*dv
	switch stage {
	case "input":
		return p(0, 1, 0)
	case "mixer_in":
		return p(h, 1, 0)
	case "qkv_proj", "z_proj", "b_proj", "a_proj", "g", "beta":
		return p(proj, 1, 1)
	case "conv_out", "v":
		return p(proj+k, 1, 1)
	case "q_l2", "k_l2":
		return p(proj+k+dk, 1, 1)
	case "core_out", "final_state":
		return p(core, 1, 1)
	case "gated_norm_out":
		return p(core+dv, 2, 2)
	case "mixer_out":
		return p(mixer, 2, 3)
	case "mlp_in":
		return p(mixer+h, 2, 3)
	}
	return p(mixer+proj+inter, 2, 5)
}

// On every dense golden checkpoint, each stage's path and both of its
// bars are the documented model's, at short and long T.
func TestStagePathsAreTheDocumentedModel(t *testing.T) {
	for _, name := range []string{"causal-f32-t70-b2", "causal-f16-t130", "hub-bf16-sharded", "device-d128"} {
		m, err := model.Load(filepath.Join(goldenRoot, name))
		require.NoError(t, err, name)
		for _, tokens := range []int{1, 7, 130, 5000} {
			for li, b := range m.Blocks {
				paths := blockPaths(m, li, tokens)
				require.Contains(t, paths, "output")
				for stage, got := range paths {
					want := densePath(m.Config, b.Kind, stage, tokens)
					assert.Equal(t, want, got, "%s layer %d %s T=%d", name, li, stage, tokens)
					for _, bf16 := range []bool{false, true} {
						assert.Equal(t, BarFor(want, bf16), BarFor(got, bf16))
					}
				}
				assert.Equal(t, paths["output"], pathOf(paths, "no_such_stage"), "an unlisted stage gets the layer output's path")
			}
		}
		require.NoError(t, m.Close())
	}
}

// The bars follow the formula of docs/tolerances.md: float32 8·2⁻²⁴·√n·amp
// capped at the golden bars, bf16 4·2⁻⁸·√m·amp; max-abs 10× either.
func TestBarFor(t *testing.T) {
	u := math.Ldexp(1, -24)
	b := BarFor(tensor.StagePath{Reduction: 64, Amp: 1, Products: 1}, false)
	assert.InDelta(t, 8*u*8, b.RelL2, 1e-20)
	assert.InDelta(t, 10*b.RelL2, b.MaxAbsScaled, 1e-20)
	assert.Equal(t, 64, b.N)
	b = BarFor(tensor.StagePath{Reduction: 64, Amp: 2, Products: 1}, false)
	assert.InDelta(t, 2*8*u*8, b.RelL2, 1e-20, "amp scales the bar")
	b = BarFor(tensor.StagePath{Reduction: 1 << 30, Amp: 2, Products: 1}, false)
	assert.Equal(t, tensor.GoldenTolerance, b.Tolerance, "never looser than the golden bars")
	b = BarFor(tensor.StagePath{Reduction: 0, Amp: 1}, false)
	assert.InDelta(t, 8*u, b.RelL2, 1e-20, "a path of no reduction counts as one")

	b = BarFor(tensor.StagePath{Reduction: 1 << 30, Amp: 2, Products: 4}, true)
	assert.InDelta(t, 4*math.Ldexp(1, -8)*2*2, b.RelL2, 1e-15, "bf16: independent of n")
	assert.InDelta(t, 10*b.RelL2, b.MaxAbsScaled, 1e-15)
	assert.Equal(t, BarFor(tensor.StagePath{Amp: 1, Products: 1}, true), BarFor(tensor.StagePath{Amp: 1}, true), "at least one product")
}

// densePathOf is a path of reduction n, no amplification, one product.
func densePathOf(n int) tensor.StagePath { return tensor.StagePath{Reduction: n, Amp: 1, Products: 1} }
