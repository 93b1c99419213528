package moe

import "github.com/qwenref/qwenref/tensor"

// Stages lists, in recording order, what Layer.Forward records for t
// tokens at these dims: each stage's name and shape, and its path from
// the block's input x, which the trace comparison's error model turns
// into a bar (docs/tolerances.md).
func (d Dims) Stages(t int) []tensor.Stage {
	p := d.paths()
	return []tensor.Stage{
		{Name: "router_logits", Shape: []int{t, d.Experts}, Path: p.router},
		{Name: "router_weights", Shape: []int{t, d.TopK}, Path: p.route},
		{Name: "router_experts", Shape: []int{t, d.TopK}, Path: p.route},
		{Name: "experts_out", Shape: []int{t, d.Hidden}, Path: p.experts},
		{Name: "shared_out", Shape: []int{t, d.Hidden}, Path: p.shared},
		{Name: "shared_gate", Shape: []int{t, 1}, Path: p.router},
	}
}

// OutputPath is the path from x to the block's output out.
func (d Dims) OutputPath() tensor.StagePath {
	return d.paths().out
}

type stagePaths struct{ router, route, experts, shared, out tensor.StagePath }

// paths follows the block: the router and the shared gate reduce over
// their fan-in H and the softmax over the E experts; an expert's SwiGLU
// over H (gate and up, one product's rounding) then its width (down); the
// routed sum adds k terms and brings the router's product onto the path.
// The output is the longer of the routed and shared branches.
func (d Dims) paths() stagePaths {
	var p stagePaths
	p.router = tensor.StagePath{Reduction: d.Hidden, Amp: 1, Products: 1}
	p.route = p.router.Then(tensor.StagePath{Reduction: d.Experts, Amp: 1})
	p.experts = tensor.StagePath{Reduction: d.Hidden + d.Inter + d.TopK, Amp: 1, Products: 3}
	p.shared = tensor.StagePath{Reduction: d.Hidden + d.SharedInter, Amp: 1, Products: 2}
	p.out = p.experts
	if p.shared.Reduction > p.out.Reduction {
		p.out.Reduction = p.shared.Reduction
	}
	return p
}
