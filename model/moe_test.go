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

// nextConfigJSON is a small qwen3_next config: the fused GDN projections
// (two value heads per key head), layer 1 dense through mlp_only_layers,
// decoder_sparse_step 1, top-3 of 6 without renormalisation.
const nextConfigJSON = `{"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next",
"vocab_size":64,"hidden_size":32,"intermediate_size":40,"num_hidden_layers":4,
"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],
"num_attention_heads":2,"num_key_value_heads":1,"head_dim":16,
"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":8,"linear_value_head_dim":12,
"linear_conv_kernel_dim":4,"num_experts":6,"num_experts_per_tok":3,"norm_topk_prob":false,
"decoder_sparse_step":1,"mlp_only_layers":[1],"moe_intermediate_size":16,"shared_expert_intermediate_size":24,
"rms_norm_eps":1e-6,"rope_theta":10000000,"partial_rotary_factor":0.25,"tie_word_embeddings":false}`

func tinyMoE(t *testing.T) (*Config, []byte) {
	js, err := ShapeConfigJSON("tiny-moe")
	require.NoError(t, err)
	cfg, err := ParseConfig(js)
	require.NoError(t, err)
	return cfg, js
}

func TestMoEConfigs(t *testing.T) {
	cfg, _ := tinyMoE(t)
	assert.Equal(t, "qwen3_5_moe", cfg.ModelType)
	assert.Equal(t, 4, cfg.SparseLayers(), "every qwen3_5_moe layer is sparse")
	assert.True(t, cfg.MoE.NormTopKProb)
	assert.False(t, cfg.FusedGDNProjections)

	next, err := ParseConfig([]byte(nextConfigJSON))
	require.NoError(t, err)
	assert.True(t, next.FusedGDNProjections)
	assert.False(t, next.MoE.NormTopKProb)
	var sparse []bool
	for i := range next.LayerTypes {
		sparse = append(sparse, next.SparseLayer(i))
	}
	assert.Equal(t, []bool{true, false, true, true}, sparse)

	step2, err := ParseConfig([]byte(strings.Replace(nextConfigJSON, `"decoder_sparse_step":1,"mlp_only_layers":[1]`, `"decoder_sparse_step":2`, 1)))
	require.NoError(t, err)
	sparse = sparse[:0]
	for i := range step2.LayerTypes {
		sparse = append(sparse, step2.SparseLayer(i))
	}
	assert.Equal(t, []bool{false, true, false, true}, sparse, "(i+1) %% decoder_sparse_step == 0")

	for _, c := range []struct{ name, from, to, want string }{
		{"top-k over E", `"num_experts_per_tok":3`, `"num_experts_per_tok":7`, "num_experts_per_tok is 7"},
		{"no experts", `"num_experts":6`, `"num_experts":0`, "num_experts is 0"},
		{"huge experts", `"num_experts":6`, `"num_experts":1000000000`, "num_experts is 1000000000"},
		{"step 0", `"decoder_sparse_step":1`, `"decoder_sparse_step":0`, "decoder_sparse_step is 0"},
		{"bad layer", `"mlp_only_layers":[1]`, `"mlp_only_layers":[9]`, "mlp_only_layers names layer 9"},
		{"missing", `"moe_intermediate_size":16,`, ``, "missing required keys: moe_intermediate_size"},
		{"dense needs width", `"intermediate_size":40,`, ``, "intermediate_size must be positive"},
	} {
		_, err := ParseConfig([]byte(strings.Replace(nextConfigJSON, c.from, c.to, 1)))
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	many := strings.NewReplacer(`"num_experts":6`, `"num_experts":65536`, `"num_hidden_layers":4`, `"num_hidden_layers":8`,
		`"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],`, ``).Replace(nextConfigJSON)
	_, err = ParseConfig([]byte(many))
	assert.ErrorContains(t, err, "num_experts × sparse layers is 458752")
	huge := strings.NewReplacer(`"num_experts":6`, `"num_experts":60000`, `"moe_intermediate_size":16`, `"moe_intermediate_size":16000000`).Replace(nextConfigJSON)
	_, err = ParseConfig([]byte(huge))
	assert.ErrorContains(t, err, "mlp.experts.gate_up_proj [num_experts, 2·moe_intermediate_size, hidden_size] has more than")
	// qwen3_next with every layer sparse needs no dense intermediate_size.
	allSparse := strings.Replace(strings.Replace(nextConfigJSON, `"intermediate_size":40,`, ``, 1), `"mlp_only_layers":[1]`, `"mlp_only_layers":[]`, 1)
	_, err = ParseConfig([]byte(allSparse))
	assert.NoError(t, err)
}

func forwardLogits(t *testing.T, m *Model, ids []int, backend string, rec tensor.Recorder) []float32 {
	be, err := ParseBackend(backend)
	require.NoError(t, err)
	defer be.Close()
	out, err := m.NewSession().Forward(ids, be, Options{Record: rec})
	require.NoError(t, err)
	return slices.Clone(out.Data)
}

// Every CPU backend and the naive MoE kernel swapped into the fast one
// agree on the whole model's logits, for a qwen3_5_moe and a qwen3_next.
func TestMoEModelBackendsAgree(t *testing.T) {
	moeCfg, _ := tinyMoE(t)
	next, err := ParseConfig([]byte(nextConfigJSON))
	require.NoError(t, err)
	for _, cfg := range []*Config{moeCfg, next} {
		m, err := NewRandom(cfg, 3, false)
		require.NoError(t, err)
		ids := []int{1, 5, 9, 2, 33, 17, 8, 40, 3, 3, 3, 12}
		stages := map[string]bool{}
		want := forwardLogits(t, m, ids, "naive", func(s string, _ *tensor.Tensor) { stages[s] = true })
		for i := range cfg.LayerTypes {
			assert.Equal(t, cfg.SparseLayer(i), stages[fmt.Sprintf("layers.%d.router_logits", i)], "%s layer %d", cfg.ModelType, i)
		}
		for _, be := range []string{"chunked", "chunked:moe=naive", "naive:moe=grouped"} {
			got := forwardLogits(t, m, ids, be, nil)
			e := tensor.CompareStage(got, want)
			assert.True(t, e.Within(tensor.GoldenTolerance), "%s on %s: %+v", cfg.ModelType, be, e)
		}
	}
}

// Cached decoding through MoE layers equals a full forward: the naive
// backend exactly, the fast one at the golden bar.
func TestMoEDecodeEqualsFullForward(t *testing.T) {
	cfg, _ := tinyMoE(t)
	m, err := NewRandom(cfg, 4, false)
	require.NoError(t, err)
	ids := []int{4, 8, 15, 16, 23, 42, 7, 1, 0, 99}
	for _, backend := range []string{"naive", "chunked"} {
		full := forwardLogits(t, m, ids, backend, nil)
		be, _ := ParseBackend(backend)
		s := m.NewSession()
		var got []float32
		out, err := s.Forward(ids[:6], be, Options{})
		require.NoError(t, err)
		got = append(got, out.Data...)
		for _, id := range ids[6:] {
			out, err := s.Forward([]int{id}, be, Options{})
			require.NoError(t, err)
			got = append(got, out.Data...)
		}
		if backend == "naive" {
			assert.Equal(t, full, got)
		} else {
			assert.True(t, tensor.CompareStage(got, full).Within(tensor.GoldenTolerance), backend)
		}
	}
}

// Qwen3-Next's fused projections, de-interleaved at load, give exactly the
// stages transformers' fix_query_key_value_ordering makes from the fused
// outputs: project with the fused matrix, view [n_k, 2d_k + 2r·d_v] and
// [n_k, 2r], split, flatten.
func TestNextFusedProjectionsMatchTransformersSplit(t *testing.T) {
	cfg, err := ParseConfig([]byte(nextConfigJSON))
	require.NoError(t, err)
	src := &randomSource{seed: 9, specs: map[string]TensorSpec{}}
	for _, e := range cfg.ExpectedTensors() {
		src.specs[e.Name] = e
	}
	m, _, err := build(cfg, src, nil)
	require.NoError(t, err)
	qkvz, err := src.Matrix("layers.0.linear_attn.in_proj_qkvz.weight")
	require.NoError(t, err)
	ba, err := src.Matrix("layers.0.linear_attn.in_proj_ba.weight")
	require.NoError(t, err)

	h, nk, nv, dk, dv := cfg.HiddenSize, cfg.LinearNumKeyHeads, cfg.LinearNumValueHeads, cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	r := nv / nk
	x := RandomValues(1, TensorSpec{Name: "x", Shape: []int{3, h}})
	got := map[string][]float32{}
	be, _ := ParseBackend("naive")
	st := m.Blocks[0].NewState()
	out := make([]float32, len(x))
	require.NoError(t, m.Blocks[0].Mix(out, x, 3, st, be, func(s string, v *tensor.Tensor) { got[s] = slices.Clone(v.Data) }))

	yq := make([]float32, 3*qkvz.Rows)
	yb := make([]float32, 3*ba.Rows)
	require.NoError(t, be.MatMul.MatMulT(yq, x, 3, qkvz))
	require.NoError(t, be.MatMul.MatMulT(yb, x, 3, ba))
	var wantQKV, wantZ, wantB, wantA []float32
	for tok := range 3 {
		row := yq[tok*qkvz.Rows : (tok+1)*qkvz.Rows]
		brow := yb[tok*ba.Rows : (tok+1)*ba.Rows]
		var q, k, v []float32
		per := 2*dk + 2*r*dv
		for g := range nk {
			grp := row[g*per : (g+1)*per]
			q = append(q, grp[:dk]...)
			k = append(k, grp[dk:2*dk]...)
			v = append(v, grp[2*dk:2*dk+r*dv]...)
			wantZ = append(wantZ, grp[2*dk+r*dv:]...)
			bg := brow[g*2*r : (g+1)*2*r]
			wantB = append(wantB, bg[:r]...)
			wantA = append(wantA, bg[r:]...)
		}
		wantQKV = append(append(append(wantQKV, q...), k...), v...)
	}
	assert.Equal(t, wantQKV, got["qkv_proj"])
	assert.Equal(t, wantZ, got["z_proj"])
	assert.Equal(t, wantB, got["b_proj"])
	assert.Equal(t, wantA, got["a_proj"])
}

// A synthetic MoE checkpoint (fused experts, hub layout, shards) loads into
// exactly NewRandom's model; the same weights stored one tensor per expert
// load into the same model too.
func TestMoESyntheticAndPerExpertLayouts(t *testing.T) {
	cfg, js := tinyMoE(t)
	dir := t.TempDir()
	require.NoError(t, WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 21, ShardBytes: 1 << 20}))
	disk, err := Load(dir)
	require.NoError(t, err)
	defer disk.Close()
	assert.Empty(t, disk.Warnings)
	mem, err := NewRandom(cfg, 21, true)
	require.NoError(t, err)
	ids := []int{3, 1, 4, 1, 5, 9, 2, 6}
	want := forwardLogits(t, mem, ids, "chunked", nil)
	assert.Equal(t, want, forwardLogits(t, disk, ids, "chunked", nil))

	// Rewrite every fused expert tensor as per-expert tensors.
	per := t.TempDir()
	var headers []weights.TensorHeader
	data := map[string][]float32{}
	for _, e := range cfg.ExpectedTensors() {
		v := RandomValues(21, e)
		for i, x := range v {
			v[i] = tensor.BF16ToFloat32(tensor.Float32ToBF16(x))
		}
		base, isFused := strings.CutSuffix(e.Name, "mlp.experts.gate_up_proj")
		baseDown, isDown := strings.CutSuffix(e.Name, "mlp.experts.down_proj")
		switch {
		case isFused:
			rows, cols := e.Shape[1]/2, e.Shape[2]
			for x := range e.Shape[0] {
				g := fmt.Sprintf("%smlp.experts.%d.gate_proj.weight", base, x)
				u := fmt.Sprintf("%smlp.experts.%d.up_proj.weight", base, x)
				off := x * 2 * rows * cols
				data[g], data[u] = v[off:off+rows*cols], v[off+rows*cols:off+2*rows*cols]
				headers = append(headers, weights.TensorHeader{Name: g, DType: "F32", Shape: []int{rows, cols}},
					weights.TensorHeader{Name: u, DType: "F32", Shape: []int{rows, cols}})
			}
		case isDown:
			rows, cols := e.Shape[1], e.Shape[2]
			for x := range e.Shape[0] {
				d := fmt.Sprintf("%smlp.experts.%d.down_proj.weight", baseDown, x)
				data[d] = v[x*rows*cols : (x+1)*rows*cols]
				headers = append(headers, weights.TensorHeader{Name: d, DType: "F32", Shape: []int{rows, cols}})
			}
		default:
			data[e.Name] = v
			headers = append(headers, weights.TensorHeader{Name: e.Name, DType: "F32", Shape: e.Shape})
		}
	}
	w, err := weights.NewStreamWriter(filepath.Join(per, "model.safetensors"), headers, nil)
	require.NoError(t, err)
	for _, name := range w.Order() {
		require.NoError(t, w.Append(name, data[name]))
	}
	require.NoError(t, w.Close())
	require.NoError(t, os.WriteFile(filepath.Join(per, "config.json"), js, 0o644))
	pm, err := Load(per)
	require.NoError(t, err)
	defer pm.Close()
	assert.Empty(t, pm.Warnings)
	got := forwardLogits(t, pm, ids, "chunked", nil)
	assert.True(t, tensor.CompareStage(got, want).Within(tensor.GoldenTolerance), "per-expert f32 vs fused bf16 of the same values")
}

// A checkpoint missing one expert tensor, or with the wrong expert count,
// is refused before any compute, naming the tensor.
func TestMoECheckTensorsNamesTheProblem(t *testing.T) {
	cfg, js := tinyMoE(t)
	dir := t.TempDir()
	require.NoError(t, WriteSynthetic(dir, cfg, js, SynthOptions{Seed: 2}))
	bad := strings.Replace(string(js), `"num_experts":16`, `"num_experts":15`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(bad), 0o644))
	_, err := Load(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "layers.0.mlp.experts.gate_up_proj")
	assert.Contains(t, err.Error(), "want [15 64 64]")
}
