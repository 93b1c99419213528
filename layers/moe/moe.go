// Package moe is the sparse mixture-of-experts MLP of Qwen3.5/3.6-MoE
// (qwen3_5_moe) and Qwen3-Next (qwen3_next), as transformers 5.17 defines
// it (docs/moe.md):
//
//	p        = softmax(x W_routerᵀ)                 over the E experts, float32
//	S, w     = top-k of p (ties: the lower index first)
//	w        ← w / Σw                               when NormTopK
//	experts  = Σ_{e∈S} w_e · W_down,e (SiLU(W_gate,e x) ⊙ W_up,e x)
//	out      = experts + σ(x w_sgᵀ) · SharedMLP(x)
//
// The routed sum has two forms behind Kernel: Naive, a per-token loop
// over the chosen experts that reads like the equation, and Grouped, which
// gathers the tokens of each expert and runs one GEMM per expert and
// projection through the backend's linalg.MatMuler.
package moe

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/act"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// Dims are the shapes and routing rule of one MoE block.
type Dims struct {
	Hidden      int  // H
	Experts     int  // E, num_experts
	TopK        int  // k, num_experts_per_tok
	Inter       int  // I, moe_intermediate_size (each routed expert)
	SharedInter int  // shared_expert_intermediate_size
	NormTopK    bool // renormalise the k chosen probabilities to sum to 1
}

// Weights are one block's parameters; the tags name the checkpoint
// tensors under `layers.N.mlp.` with their stored shapes. The routed
// experts are stored either fused (Fused, transformers 5.17's layout) or
// one tensor per expert (PerExpert); Gate, Up and Down are views of
// whichever is set, made by BindExperts.
type Weights struct {
	Router     *tensor.Matrix `tensor:"gate.weight" shape:"E,H"`
	SharedGate *tensor.Matrix `tensor:"shared_expert.gate_proj.weight" shape:"I_s,H"`
	SharedUp   *tensor.Matrix `tensor:"shared_expert.up_proj.weight" shape:"I_s,H"`
	SharedDown *tensor.Matrix `tensor:"shared_expert.down_proj.weight" shape:"H,I_s"`
	SharedProb *tensor.Matrix `tensor:"shared_expert_gate.weight" shape:"1,H"` // the shared expert's sigmoid gate

	Fused     *FusedExperts   `tensor:""`
	PerExpert []ExpertWeights `tensor:"experts.%d."`

	Gate, Up []*tensor.Matrix // per expert [I, H]
	Down     []*tensor.Matrix // per expert [H, I]
}

// FusedExperts are the routed experts as two rank-3 tensors, each held as
// its [E·rows, cols] matrix: per expert, rows 0…I−1 of gate_up are the
// gate and rows I…2I−1 the up projection.
type FusedExperts struct {
	GateUp *tensor.Matrix `tensor:"experts.gate_up_proj" shape:"E,2*I_e,H"`
	Down   *tensor.Matrix `tensor:"experts.down_proj" shape:"E,H,I_e"`
}

// ExpertWeights are one routed expert's tensors in the per-expert layout
// (Qwen3-Next's hub files and older conversions).
type ExpertWeights struct {
	Gate *tensor.Matrix `tensor:"gate_proj.weight" shape:"I_e,H"`
	Up   *tensor.Matrix `tensor:"up_proj.weight" shape:"I_e,H"`
	Down *tensor.Matrix `tensor:"down_proj.weight" shape:"H,I_e"`
}

// BindExperts makes Gate, Up and Down views of the stored experts (no
// copy), once their tensors are bound.
func (w *Weights) BindExperts(d Dims) {
	w.Gate = make([]*tensor.Matrix, d.Experts)
	w.Up = make([]*tensor.Matrix, d.Experts)
	w.Down = make([]*tensor.Matrix, d.Experts)
	if w.PerExpert != nil {
		for e := range min(d.Experts, len(w.PerExpert)) {
			w.Gate[e], w.Up[e], w.Down[e] = w.PerExpert[e].Gate, w.PerExpert[e].Up, w.PerExpert[e].Down
		}
		return
	}
	if w.Fused == nil || w.Fused.GateUp == nil || w.Fused.Down == nil {
		return
	}
	in, h := d.Inter, d.Hidden
	for e := range d.Experts {
		g0 := e * 2 * in
		w.Gate[e] = rowsView(w.Fused.GateUp, g0, in)
		w.Up[e] = rowsView(w.Fused.GateUp, g0+in, in)
		w.Down[e] = rowsView(w.Fused.Down, e*h, h)
	}
}

// rowsView is rows [r0, r0+n) of m, sharing its storage.
func rowsView(m *tensor.Matrix, r0, n int) *tensor.Matrix {
	v := &tensor.Matrix{Rows: n, Cols: m.Cols}
	lo, hi := r0*m.Cols, (r0+n)*m.Cols
	if m.BF16 != nil {
		v.BF16 = m.BF16[lo:hi:hi]
	} else {
		v.F32 = m.F32[lo:hi:hi]
	}
	return v
}

// Layer is one sparse MoE block.
type Layer struct {
	Dims Dims
	W    Weights
	// Prefetch, if set, is called once for each expert the tokens of a
	// call were routed to, before any expert runs: a memory-mapped model
	// starts reading those experts' pages (and only those) there.
	Prefetch func(expert int)
}

// Routing is the router's decision for T tokens: for token t, the experts
// Experts[t·k : (t+1)·k] in descending probability with their weights.
type Routing struct {
	K       int
	Experts []int32   // [T, k]
	Weights []float32 // [T, k]
}

// Kernel computes the routed part: out [T, H] = Σ over each token's chosen
// experts of weight · expert(x). out is overwritten. Implementations must
// be safe for concurrent use.
type Kernel interface {
	Experts(out, x []float32, t int, l *Layer, r *Routing, mm linalg.MatMuler) error
}

// Check validates the weights against the dims (shapes and expert counts).
func (l *Layer) Check() error {
	d := l.Dims
	if d.Experts <= 0 || d.TopK <= 0 || d.TopK > d.Experts {
		return fmt.Errorf("moe: top-k %d of %d experts", d.TopK, d.Experts)
	}
	want := func(name string, m *tensor.Matrix, rows, cols int) error {
		if m == nil {
			return fmt.Errorf("moe: %s is missing", name)
		}
		if m.Rows != rows || m.Cols != cols {
			return fmt.Errorf("moe: %s is [%d, %d], want [%d, %d]", name, m.Rows, m.Cols, rows, cols)
		}
		return nil
	}
	h := d.Hidden
	errs := []error{
		want("router", l.W.Router, d.Experts, h),
		want("shared gate_proj", l.W.SharedGate, d.SharedInter, h),
		want("shared up_proj", l.W.SharedUp, d.SharedInter, h),
		want("shared down_proj", l.W.SharedDown, h, d.SharedInter),
		want("shared expert gate", l.W.SharedProb, 1, h),
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	if len(l.W.Gate) != d.Experts || len(l.W.Up) != d.Experts || len(l.W.Down) != d.Experts {
		return fmt.Errorf("moe: %d/%d/%d expert matrices for %d experts", len(l.W.Gate), len(l.W.Up), len(l.W.Down), d.Experts)
	}
	for e := range d.Experts {
		for _, err := range []error{
			want(fmt.Sprintf("expert %d gate", e), l.W.Gate[e], d.Inter, h),
			want(fmt.Sprintf("expert %d up", e), l.W.Up[e], d.Inter, h),
			want(fmt.Sprintf("expert %d down", e), l.W.Down[e], h, d.Inter),
		} {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Route turns router logits [T, E] into each token's top-k experts and
// weights: softmax in float32 (max-subtracted, the sum in float64), the k
// largest probabilities in descending order with ties to the lower
// expert index, then the renormalisation when NormTopK.
func (d Dims) Route(logits []float32, t int) Routing {
	e, k := d.Experts, d.TopK
	r := Routing{K: k, Experts: make([]int32, t*k), Weights: make([]float32, t*k)}
	p := make([]float32, e)
	for i := range t {
		softmax(p, logits[i*e:(i+1)*e])
		idx, w := r.Experts[i*k:(i+1)*k], r.Weights[i*k:(i+1)*k]
		torchTopK(idx, w, p) // torch.topk's own order, ties included (topk.go)
		if d.NormTopK {
			var s float32
			for _, v := range w {
				s += v
			}
			for j := range w {
				w[j] /= s
			}
		}
	}
	return r
}

// softmax writes softmax(x) into p in float32, as torch does for a float32
// input: exp(x − max) / Σ exp(x − max).
func softmax(p, x []float32) {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var s float64
	for i, v := range x {
		p[i] = float32(math.Exp(float64(v - m)))
		s += float64(p[i])
	}
	inv := float32(s)
	for i := range p {
		p[i] /= inv
	}
}

// Work carries one forward's intermediates from stage to stage, so that
// the stages can also run one at a time, as a block plan walks them
// (model.Plan).
type Work struct {
	T       int
	Logits  []float32 // [T, E]: the router's
	Routing Routing
	Shared  []float32 // [T, H]: the shared expert, before its gate
	Gate    []float32 // [T]: the shared expert gate's logit
}

// Forward maps x [T, H] to out [T, H], recording "router_logits" [T, E],
// "router_weights" and "router_experts" [T, k], "experts_out",
// "shared_out" (before its gate), "shared_gate" [T, 1] (the gate's logit)
// when rec is set.
func (l *Layer) Forward(out, x []float32, t int, kern Kernel, mm linalg.MatMuler, rec tensor.Recorder) error {
	if len(out) != t*l.Dims.Hidden {
		return fmt.Errorf("moe: out has %d values, want T·H = %d·%d", len(out), t, l.Dims.Hidden)
	}
	w := &Work{T: t}
	if err := l.Route(w, x, mm, rec); err != nil {
		return err
	}
	if err := l.Experts(out, w, x, kern, mm, rec); err != nil {
		return err
	}
	if err := l.SharedExpert(w, x, mm, rec); err != nil {
		return err
	}
	l.Combine(out, w)
	return nil
}

// Route is the router: logits = x W_routerᵀ, then softmax, top-k and the
// renormalisation (Dims.Route).
func (l *Layer) Route(w *Work, x []float32, mm linalg.MatMuler, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	if len(x) != t*d.Hidden {
		return fmt.Errorf("moe: x has %d values, want T·H = %d·%d", len(x), t, d.Hidden)
	}
	w.Logits = make([]float32, t*d.Experts)
	if err := mm.MatMulT(w.Logits, x, t, l.W.Router); err != nil {
		return fmt.Errorf("moe router: %w", err)
	}
	rec.Record("router_logits", w.Logits, t, d.Experts)
	w.Routing = d.Route(w.Logits, t)
	if rec != nil {
		ids := make([]float32, len(w.Routing.Experts))
		for i, e := range w.Routing.Experts {
			ids[i] = float32(e)
		}
		rec.Record("router_weights", w.Routing.Weights, t, d.TopK)
		rec.Record("router_experts", ids, t, d.TopK)
	}
	return nil
}

// Experts writes out [T, H] = Σ_{e∈S} w_e · SwiGLU_e(x), the chosen
// experts' weighted sum, on kern.
func (l *Layer) Experts(out []float32, w *Work, x []float32, kern Kernel, mm linalg.MatMuler, rec tensor.Recorder) error {
	if len(out) != w.T*l.Dims.Hidden {
		return fmt.Errorf("moe: out has %d values, want T·H = %d·%d", len(out), w.T, l.Dims.Hidden)
	}
	if l.Prefetch != nil {
		seen := make([]bool, l.Dims.Experts)
		for _, e := range w.Routing.Experts {
			if !seen[e] {
				seen[e] = true
				l.Prefetch(int(e))
			}
		}
	}
	if err := kern.Experts(out, x, w.T, l, &w.Routing, mm); err != nil {
		return err
	}
	rec.Record("experts_out", out, w.T, l.Dims.Hidden)
	return nil
}

// SharedExpert computes the shared expert's SwiGLU MLP of x and its gate's
// logit x w_sgᵀ.
func (l *Layer) SharedExpert(w *Work, x []float32, mm linalg.MatMuler, rec tensor.Recorder) error {
	t, h := w.T, l.Dims.Hidden
	w.Shared = make([]float32, t*h)
	if err := swiGLU(w.Shared, x, t, l.W.SharedGate, l.W.SharedUp, l.W.SharedDown, mm); err != nil {
		return fmt.Errorf("moe shared expert: %w", err)
	}
	rec.Record("shared_out", w.Shared, t, h)
	w.Gate = make([]float32, t)
	if err := mm.MatMulT(w.Gate, x, t, l.W.SharedProb); err != nil {
		return fmt.Errorf("moe shared expert gate: %w", err)
	}
	rec.Record("shared_gate", w.Gate, t, 1)
	return nil
}

// Combine adds the gated shared expert to the experts' sum in out:
// out += σ(gate)·shared.
func (l *Layer) Combine(out []float32, w *Work) {
	h := l.Dims.Hidden
	for i := range w.T {
		s := act.Sigmoid(w.Gate[i])
		o, sh := out[i*h:(i+1)*h], w.Shared[i*h:(i+1)*h]
		for j := range o {
			o[j] += s * sh[j]
		}
	}
}

// swiGLU is out [m, H] = W_down(SiLU(W_gate x) ⊙ W_up x) for x [m, H].
func swiGLU(out, x []float32, m int, gate, up, down *tensor.Matrix, mm linalg.MatMuler) error {
	g := make([]float32, m*gate.Rows)
	u := make([]float32, m*up.Rows)
	if err := mm.MatMulT(g, x, m, gate); err != nil {
		return fmt.Errorf("gate_proj: %w", err)
	}
	if err := mm.MatMulT(u, x, m, up); err != nil {
		return fmt.Errorf("up_proj: %w", err)
	}
	act.SiLUMul(g, g, u)
	if err := mm.MatMulT(out, g, m, down); err != nil {
		return fmt.Errorf("down_proj: %w", err)
	}
	return nil
}
