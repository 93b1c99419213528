package attention

import "github.com/qwenref/qwenref/tensor"

// Stages lists, in recording order, what Layer.Forward records for t new
// tokens at these dims from an empty cache: each stage's name and shape,
// and its path from the layer's input x, which the trace comparison's
// error model turns into a bar (docs/tolerances.md).
func (d LayerDims) Stages(t int) []tensor.Stage {
	p := d.paths(t)
	return []tensor.Stage{
		{Name: "q_proj", Shape: []int{t, 2 * d.NH * d.D}, Path: p.proj},
		{Name: "k_proj", Shape: []int{t, d.NKV * d.D}, Path: p.proj},
		{Name: "v_proj", Shape: []int{t, d.NKV * d.D}, Path: p.proj},
		{Name: "q_rope", Shape: []int{t, d.NH, d.D}, Path: p.rope},
		{Name: "k_rope", Shape: []int{t, d.NKV, d.D}, Path: p.rope},
		{Name: "attn_core", Shape: []int{t, d.NH, d.D}, Path: p.core},
		{Name: "gated", Shape: []int{t, d.NH * d.D}, Path: p.core},
	}
}

// OutputPath is the path from x to the layer's output out, for t new
// tokens from an empty cache.
func (d LayerDims) OutputPath(t int) tensor.StagePath {
	return d.paths(t).out
}

type stagePaths struct{ proj, rope, core, out tensor.StagePath }

// paths follows the layer: a projection reduces over its fan-in H, the
// q/k RMSNorm over d_h, q·k over d_h, the softmax sum over the t keys of
// a fresh sequence, and o_proj over n_h·d_h. RoPE and the output gate are
// elementwise.
func (d LayerDims) paths(t int) stagePaths {
	var p stagePaths
	p.proj = tensor.StagePath{Reduction: d.Hidden, Amp: 1, Products: 1}
	p.rope = p.proj.Then(tensor.StagePath{Reduction: d.D, Amp: 1})
	p.core = p.rope.Then(tensor.StagePath{Reduction: d.D + t, Amp: 1})
	p.out = p.core.Then(tensor.StagePath{Reduction: d.NH * d.D, Amp: 1, Products: 1})
	return p
}
