package reference

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// goldenConfig is the part of a golden checkpoint's config.json the layer
// references need.
type goldenConfig struct {
	H       int      `json:"hidden_size"`
	I       int      `json:"intermediate_size"`
	NH      int      `json:"num_attention_heads"`
	NKV     int      `json:"num_key_value_heads"`
	D       int      `json:"head_dim"`
	NK      int      `json:"linear_num_key_heads"`
	NV      int      `json:"linear_num_value_heads"`
	DK      int      `json:"linear_key_head_dim"`
	DV      int      `json:"linear_value_head_dim"`
	K       int      `json:"linear_conv_kernel_dim"`
	Eps     float64  `json:"rms_norm_eps"`
	Layers  []string `json:"layer_types"`
	Partial float64  `json:"partial_rotary_factor"`
	Rope    struct {
		Theta float64 `json:"rope_theta"`
	} `json:"rope_parameters"`
}

// goldenDecoder reads layer li of a golden checkpoint as DecoderParams.
func goldenDecoder(t *testing.T, st *weights.Store, c goldenConfig, li int) *DecoderParams {
	w := func(name string) []float64 {
		x, _, err := st.Float32(fmt.Sprintf("layers.%d.%s", li, name))
		require.NoError(t, err)
		return Widen(x)
	}
	p := &DecoderParams{H: c.H, I: c.I, Eps: c.Eps, InputNorm: w("input_layernorm.weight"), PostNorm: w("post_attention_layernorm.weight"),
		Gate: w("mlp.gate_proj.weight"), Up: w("mlp.up_proj.weight"), Down: w("mlp.down_proj.weight")}
	if c.Layers[li] == "full_attention" {
		p.Attn = &AttentionMixerParams{H: c.H, NH: c.NH, NKV: c.NKV, D: c.D, Rot: int(float64(c.D) * c.Partial), Theta: c.Rope.Theta, Eps: c.Eps,
			Q: w("self_attn.q_proj.weight"), K: w("self_attn.k_proj.weight"), V: w("self_attn.v_proj.weight"), O: w("self_attn.o_proj.weight"),
			QNorm: w("self_attn.q_norm.weight"), KNorm: w("self_attn.k_norm.weight")}
		return p
	}
	p.GDN = &GDNMixerParams{H: c.H, NK: c.NK, NV: c.NV, DK: c.DK, DV: c.DV, K: c.K, Eps: c.Eps,
		QKV: w("linear_attn.in_proj_qkv.weight"), Z: w("linear_attn.in_proj_z.weight"), B: w("linear_attn.in_proj_b.weight"),
		A: w("linear_attn.in_proj_a.weight"), Conv: w("linear_attn.conv1d.weight"), ALog: w("linear_attn.A_log"),
		DtBias: w("linear_attn.dt_bias"), Norm: w("linear_attn.norm.weight"), Out: w("linear_attn.out_proj.weight")}
	return p
}

// The float64 layer references agree with transformers' float32 eager
// forward at every stage of every layer, each layer fed transformers' own
// input to it, within the golden tests' bars (row 0 of the batch).
func TestLayerReferencesMatchTransformers(t *testing.T) {
	dir := filepath.Join("..", "testdata", "golden", "causal-f32-t70-b2")
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	var c goldenConfig
	require.NoError(t, json.Unmarshal(raw, &c))
	require.NotEmpty(t, c.Layers)
	// The flat checkpoint stores the text model under "model.".
	st, err := weights.OpenNamed(filepath.Join(dir, "model.safetensors"), func(stored string) (string, bool) {
		return strings.TrimPrefix(stored, "model."), false
	})
	require.NoError(t, err)
	defer st.Close()
	exp, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
	require.NoError(t, err)
	defer exp.Close()
	const batch, seq = 2, 70
	row0 := func(name string) []float32 {
		x, _, err := exp.Float32(name)
		require.NoError(t, err, name)
		return x[:len(x)/batch]
	}
	compared, worst, worstName := 0, 0.0, ""
	for li := range c.Layers {
		p := goldenDecoder(t, st, c, li)
		prefix := fmt.Sprintf("layers.%d.", li)
		_, stages, err := DecoderLayer(Widen(row0(prefix+"input")), seq, p)
		require.NoError(t, err)
		for name, got := range stages {
			if _, ok := exp.Info(prefix + name); !ok {
				continue
			}
			e := tensor.CompareStage(Narrow(got), row0(prefix+name))
			require.True(t, e.Within(tensor.GoldenTolerance), "%s%s: rel L2 %.2e, scaled max-abs %.2e", prefix, name, e.RelL2, e.MaxAbsScaled)
			if compared++; e.RelL2 > worst {
				worst, worstName = e.RelL2, prefix+name
			}
		}
	}
	require.Greater(t, compared, 4*12, "most stages of every layer are compared")
	t.Logf("%d stages compared; worst rel L2 %.2e at %s", compared, worst, worstName)

	// The comparison can fail: (1+w) instead of w in the gated norm, or
	// RoPE left out, is caught at the stage it first touches.
	p := goldenDecoder(t, st, c, 0)
	for i := range p.GDN.Norm {
		p.GDN.Norm[i]++
	}
	_, stages, err := DecoderLayer(Widen(row0("layers.0.input")), seq, p)
	require.NoError(t, err)
	require.True(t, tensor.CompareStage(Narrow(stages["core_out"]), row0("layers.0.core_out")).Within(tensor.GoldenTolerance))
	require.False(t, tensor.CompareStage(Narrow(stages["gated_norm_out"]), row0("layers.0.gated_norm_out")).Within(tensor.GoldenTolerance))
	p = goldenDecoder(t, st, c, 3)
	p.Attn.Rot = 0
	_, stages, err = DecoderLayer(Widen(row0("layers.3.input")), seq, p)
	require.NoError(t, err)
	require.False(t, tensor.CompareStage(Narrow(stages["q_rope"]), row0("layers.3.q_rope")).Within(tensor.GoldenTolerance))
}
