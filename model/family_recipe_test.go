package model

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// The recipe of docs/architecture.md for a fourth family, followed for a
// family that stores its layers differently from the shared structs: its
// own prefix (transformer.), attention's q/k/v projections fused into one
// tensor and the MLP's gate and up fused into another, under names of its
// own. Its checkpoint of a qwen3_5 model's weights loads, with nothing
// unused, into a model whose logits are exactly the qwen3_5 checkpoint's.

// fusedFamily is the test family: step 1 (the config) is its model_type;
// step 2 (the tensors) its stored parts, what they replace, and derive.
var fusedFamily = &family{
	name:       "test_fused",
	modelTypes: []string{"test_fused"},
	prefixes:   storedPrefixes{flat: "transformer."},
	stored: func(c *Config, b *Block) (any, []any) {
		p := &fusedParts{}
		var replaces []any
		if b.MLP != nil {
			p.MLP = &fusedMLP{}
			replaces = append(replaces, &b.MLP.Gate, &b.MLP.Up)
		}
		if a := b.Attn(); a != nil {
			p.Attn = &fusedQKV{}
			replaces = append(replaces, &a.W.QProj, &a.W.KProj, &a.W.VProj)
		}
		return p, replaces
	},
	derive: func(c *Config, b *Block) error {
		p, ok := b.Stored.(*fusedParts)
		if !ok {
			return fmt.Errorf("no stored parts")
		}
		if p.MLP != nil {
			i := c.IntermediateSize
			b.MLP.Gate, b.MLP.Up = gatherRows(p.MLP.GateUp, span(0, i)), gatherRows(p.MLP.GateUp, span(i, 2*i))
		}
		if p.Attn != nil {
			w := &b.Attn().W
			q, kv := 2*c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
			w.QProj = gatherRows(p.Attn.QKV, span(0, q))
			w.KProj = gatherRows(p.Attn.QKV, span(q, q+kv))
			w.VProj = gatherRows(p.Attn.QKV, span(q+kv, q+2*kv))
		}
		return nil
	},
}

type fusedParts struct {
	MLP  *fusedMLP `tensor:""`
	Attn *fusedQKV `tensor:""`
}

type fusedMLP struct {
	GateUp *tensor.Matrix `tensor:"ffn.w12.weight" shape:"2*I,H"`
}

type fusedQKV struct {
	QKV *tensor.Matrix `tensor:"attn.wqkv.weight" shape:"2*n_h*d_h+2*n_kv*d_h,H"`
}

func span(lo, hi int) []int {
	var r []int
	for i := lo; i < hi; i++ {
		r = append(r, i)
	}
	return r
}

const recipeConfig = `{"model_type":"%s","vocab_size":96,"hidden_size":32,"intermediate_size":48,
"num_hidden_layers":3,"layer_types":["linear_attention","full_attention","linear_attention"],
"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,"linear_num_key_heads":2,
"linear_num_value_heads":4,"linear_key_head_dim":8,"linear_value_head_dim":8,
"tie_word_embeddings":false,"max_position_embeddings":256}`

func TestFamilyRecipeFusedLayout(t *testing.T) {
	saved := families
	families = append(slices.Clone(families), fusedFamily)
	t.Cleanup(func() { families = saved })

	plain := t.TempDir()
	js := fmt.Appendf(nil, recipeConfig, "qwen3_5_text")
	cfg, err := ParseConfig(js)
	require.NoError(t, err)
	require.NoError(t, WriteSynthetic(plain, cfg, js, SynthOptions{Seed: 21}))

	// The same weights in the family's layout, each tensor in its dtype.
	fused := t.TempDir()
	st, err := OpenWeights(plain)
	require.NoError(t, err)
	read := func(name string) ([]float32, string) {
		info, ok := st.Info(name)
		require.True(t, ok, name)
		v, _, err := st.Float32(name)
		require.NoError(t, err)
		return v, info.DType
	}
	var ts []weights.NamedTensor
	for _, n := range st.Names() {
		v, dt := read(n)
		info, _ := st.Info(n)
		base, _ := strings.CutPrefix(n, "layers.")
		switch {
		case strings.HasSuffix(n, ".mlp.up_proj.weight"), strings.HasSuffix(n, ".self_attn.k_proj.weight"),
			strings.HasSuffix(n, ".self_attn.v_proj.weight"):
			continue // written with their fused partner
		case strings.HasSuffix(n, ".mlp.gate_proj.weight"):
			up, _ := read(strings.Replace(n, "gate_proj", "up_proj", 1))
			l := strings.TrimSuffix(base, "mlp.gate_proj.weight")
			ts = append(ts, weights.NamedTensor{Name: "transformer.layers." + l + "ffn.w12.weight", DType: dt,
				Shape: []int{2 * info.Shape[0], info.Shape[1]}, Data: append(v, up...)})
			continue
		case strings.HasSuffix(n, ".self_attn.q_proj.weight"):
			k, _ := read(strings.Replace(n, "q_proj", "k_proj", 1))
			vv, _ := read(strings.Replace(n, "q_proj", "v_proj", 1))
			l := strings.TrimSuffix(base, "self_attn.q_proj.weight")
			rows := info.Shape[0] + 2*cfg.NumKVHeads*cfg.HeadDim
			ts = append(ts, weights.NamedTensor{Name: "transformer.layers." + l + "attn.wqkv.weight", DType: dt,
				Shape: []int{rows, info.Shape[1]}, Data: slices.Concat(v, k, vv)})
			continue
		}
		ts = append(ts, weights.NamedTensor{Name: "transformer." + n, DType: dt, Shape: info.Shape, Data: v})
	}
	require.NoError(t, st.Close())
	require.NoError(t, weights.WriteFile(filepath.Join(fused, "model.safetensors"), ts, nil))
	require.NoError(t, os.WriteFile(filepath.Join(fused, "config.json"), fmt.Appendf(nil, recipeConfig, "test_fused"), 0o644))

	fcfg, err := LoadConfig(fused)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, e := range fcfg.ExpectedTensors() {
		names[e.Name] = true
	}
	assert.True(t, names["layers.1.attn.wqkv.weight"] && names["layers.0.ffn.w12.weight"])
	assert.False(t, names["layers.1.self_attn.q_proj.weight"] || names["layers.0.mlp.gate_proj.weight"])

	a, err := Load(plain)
	require.NoError(t, err)
	defer a.Close()
	b, err := Load(fused)
	require.NoError(t, err)
	defer b.Close()
	assert.Empty(t, b.Warnings)
	be, err := ParseBackend("chunked")
	require.NoError(t, err)
	ids := []int{3, 95, 0, 41, 7, 7, 60}
	la, err := a.NewSession().Forward(ids, be, Options{})
	require.NoError(t, err)
	lb, err := b.NewSession().Forward(ids, be, Options{})
	require.NoError(t, err)
	require.Equal(t, la.Data, lb.Data)
}

// A family whose derive leaves a replaced field unset is refused by name
// of the family and layer, not run with a nil weight.
func TestFamilyMustDeriveWhatItReplaces(t *testing.T) {
	lazy := *fusedFamily
	lazy.name, lazy.modelTypes = "test_lazy", []string{"test_lazy"}
	lazy.derive = func(*Config, *Block) error { return nil }
	saved := families
	families = append(slices.Clone(families), &lazy)
	t.Cleanup(func() { families = saved })
	cfg, err := ParseConfig(fmt.Appendf(nil, recipeConfig, "test_lazy"))
	require.NoError(t, err)
	_, err = NewRandom(cfg, 1, false)
	require.ErrorContains(t, err, "layer 0: family test_lazy stores a part it does not derive")
}
