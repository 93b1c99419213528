package gateddelta

import "github.com/qwenref/qwenref/tensor"

// Stages lists, in recording order, what Layer.Forward records for t
// tokens at these dims: each stage's name and shape, and its path from
// the layer's input x, which the trace comparison's error model turns into
// a bar (docs/tolerances.md).
func (d LayerDims) Stages(t int) []tensor.Stage {
	c, hv := d.ConvDim(), d.NV*d.DV
	p := d.paths(t)
	return []tensor.Stage{
		{Name: "qkv_proj", Shape: []int{t, c}, Path: p.proj},
		{Name: "z_proj", Shape: []int{t, hv}, Path: p.proj},
		{Name: "b_proj", Shape: []int{t, d.NV}, Path: p.proj},
		{Name: "a_proj", Shape: []int{t, d.NV}, Path: p.proj},
		{Name: "conv_out", Shape: []int{t, c}, Path: p.conv},
		{Name: "g", Shape: []int{t, d.NV}, Path: p.proj},
		{Name: "beta", Shape: []int{t, d.NV}, Path: p.proj},
		{Name: "q_l2", Shape: []int{t, d.NK, d.DK}, Path: p.l2},
		{Name: "k_l2", Shape: []int{t, d.NK, d.DK}, Path: p.l2},
		{Name: "v", Shape: []int{t, d.NV, d.DV}, Path: p.conv},
		{Name: "core_out", Shape: []int{t, d.NV, d.DV}, Path: p.core},
		{Name: "final_state", Shape: []int{d.NV, d.DK, d.DV}, Path: p.core},
		{Name: "gated_norm_out", Shape: []int{t, hv}, Path: p.gatedNorm},
	}
}

// OutputPath is the path from x to the layer's output out.
func (d LayerDims) OutputPath(t int) tensor.StagePath {
	return d.paths(t).out
}

type stagePaths struct{ proj, conv, l2, core, gatedNorm, out tensor.StagePath }

// paths follows the layer: a projection reduces over its fan-in H, the
// conv over its K taps, the L2 norm over d_k, the recurrence over T·d_k
// (T rank-one updates of d_k-row states), the gated RMSNorm over d_v, and
// out_proj over n_v·d_v. The gated RMSNorm doubles relative error (it
// divides by a small RMS) and brings z_proj's product onto the path.
func (d LayerDims) paths(t int) stagePaths {
	var p stagePaths
	p.proj = tensor.StagePath{Reduction: d.Hidden, Amp: 1, Products: 1}
	p.conv = p.proj.Then(tensor.StagePath{Reduction: d.ConvK, Amp: 1})
	p.l2 = p.conv.Then(tensor.StagePath{Reduction: d.DK, Amp: 1})
	p.core = p.l2.Then(tensor.StagePath{Reduction: t * d.DK, Amp: 1})
	p.gatedNorm = p.core.Then(tensor.StagePath{Reduction: d.DV, Amp: 2, Products: 1})
	p.out = p.gatedNorm.Then(tensor.StagePath{Reduction: d.NV * d.DV, Amp: 1, Products: 1})
	return p
}
