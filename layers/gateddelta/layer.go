package gateddelta

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/layers/act"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// l2Eps is the epsilon the core adds to Σq² and Σk² (fixed at 1e-6 in
// transformers and fla, independent of rms_norm_eps).
const l2Eps = 1e-6

// LayerDims are the shapes of one Gated DeltaNet layer.
type LayerDims struct {
	Hidden int     // H
	NK, NV int     // query/key heads n_k, value heads n_v
	DK, DV int     // head dims d_k, d_v
	ConvK  int     // conv kernel K
	Eps    float32 // rms_norm_eps, used by the gated output norm
}

// ConvDim is C = 2·n_k·d_k + n_v·d_v, the channels of [q | k | v].
func (d LayerDims) ConvDim() int { return 2*d.NK*d.DK + d.NV*d.DV }

// LayerWeights are one layer's parameters; the tags name the checkpoint
// tensors under `layers.N.linear_attn.` with their stored shapes
// (docs/spec.md §2.2). A family that stores the input projections fused
// (Qwen3-Next) clears the separate_in_proj size and fills them itself.
type LayerWeights struct {
	InProjQKV *tensor.Matrix `tensor:"in_proj_qkv.weight" shape:"C,H" when:"separate_in_proj"` // rows [Q heads | K heads | V heads]
	InProjZ   *tensor.Matrix `tensor:"in_proj_z.weight" shape:"n_v*d_v,H" when:"separate_in_proj"`
	InProjB   *tensor.Matrix `tensor:"in_proj_b.weight" shape:"n_v,H" when:"separate_in_proj"`
	InProjA   *tensor.Matrix `tensor:"in_proj_a.weight" shape:"n_v,H" when:"separate_in_proj"`
	ConvW     []float32      `tensor:"conv1d.weight" shape:"C,1,K" init:"conv"`    // held as [C, K]
	DtBias    []float32      `tensor:"dt_bias" shape:"n_v" init:"softplus_offset"` // the softplus offset
	ALog      []float32      `tensor:"A_log" shape:"n_v" init:"log_decay"`         // log A, the decay rate's log
	NormW     []float32      `tensor:"norm.weight" shape:"d_v" init:"unit_scale"`  // the gated norm's plain scale
	OutProj   *tensor.Matrix `tensor:"out_proj.weight" shape:"H,n_v*d_v"`
}

// Ops are the kernels a layer runs on; naive, chunked and CUDA backends
// each supply a set.
type Ops struct {
	MatMul linalg.MatMuler
	Conv   conv1d.Kernel
	Core   Kernel
}

// State is one sequence's cache for one GDN layer: the last K pre-conv
// inputs and the float32 recurrent state (docs/spec.md §3.4).
type State struct {
	Conv []float32 // [K, C]
	S    []float32 // [n_v, d_k, d_v]
}

// NewState returns the zero state of a fresh sequence.
func NewState(d LayerDims) *State {
	return &State{Conv: make([]float32, d.ConvK*d.ConvDim()), S: make([]float32, d.NV*d.DK*d.DV)}
}

// Reset zeroes the state for a new sequence.
func (s *State) Reset() {
	clear(s.Conv)
	clear(s.S)
}

// Layer is one Gated DeltaNet token mixer (Qwen3_5GatedDeltaNet).
type Layer struct {
	Dims LayerDims
	W    LayerWeights
}

// Work carries one forward's intermediates from stage to stage, so that
// the stages can also run one at a time, as a block plan walks them
// (model.Plan). Every buffer is written in full before it is read; with
// nothing recorded they come from the pool (internal/bufpool).
type Work struct {
	T       int
	M, U    []float32 // [T, C]: the qkv projection, its conv + SiLU
	Z       []float32 // [T, n_v·d_v]
	B, A    []float32 // [T, n_v]
	Q, K    []float32 // [T, n_k·d_k]: q̂·d_k^−½, k̂
	V       []float32 // [T, n_v·d_v]
	G, Beta []float32 // [T, n_v]
	O, Y    []float32 // [T, n_v·d_v]: the core's output, the gated norm's
	buf     *bufpool.Buffers
}

// NewWork starts a forward over t tokens; pooled takes its buffers from
// the pool (when nothing keeps them), and Release hands them back.
func (l *Layer) NewWork(t int, pooled bool) *Work { return &Work{T: t, buf: bufpool.New(pooled)} }

// Release returns the work's pooled buffers; it must not be used after.
func (w *Work) Release() { w.buf.Release() }

// Forward maps x [T, H] (already input-normed) to out [T, H] for one
// sequence, reading and advancing st. rec, if not nil, sees every stage.
func (l *Layer) Forward(out, x []float32, t int, st *State, ops Ops, rec tensor.Recorder) error {
	if len(out) != t*l.Dims.Hidden { // before the state advances
		return fmt.Errorf("gateddelta layer: out has %d values, want T·H = %d", len(out), t*l.Dims.Hidden)
	}
	w := l.NewWork(t, rec == nil)
	defer w.Release()
	if err := l.InProj(w, x, ops, rec); err != nil {
		return err
	}
	if err := l.Conv(w, st, ops, rec); err != nil {
		return err
	}
	if err := l.Prep(w, rec); err != nil {
		return err
	}
	if err := l.Core(w, st, ops, rec); err != nil {
		return err
	}
	if err := l.GatedNorm(w, rec); err != nil {
		return err
	}
	return l.OutProj(out, w, ops)
}

// InProj is step 1, the projections: m = x W_qkvᵀ, z = x W_zᵀ, b = x W_bᵀ,
// a = x W_aᵀ.
func (l *Layer) InProj(w *Work, x []float32, ops Ops, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	if len(x) != t*d.Hidden {
		return fmt.Errorf("gateddelta layer: x has %d values, want T·H = %d", len(x), t*d.Hidden)
	}
	w.M, w.Z = w.buf.Get(t*d.ConvDim()), w.buf.Get(t*d.NV*d.DV)
	w.B, w.A = w.buf.Get(t*d.NV), w.buf.Get(t*d.NV)
	return linalg.Project(ops.MatMul, x, t, rec, "gateddelta",
		linalg.Projection{Y: w.M, W: l.W.InProjQKV, Name: "qkv_proj"}, linalg.Projection{Y: w.Z, W: l.W.InProjZ, Name: "z_proj"},
		linalg.Projection{Y: w.B, W: l.W.InProjB, Name: "b_proj"}, linalg.Projection{Y: w.A, W: l.W.InProjA, Name: "a_proj"})
}

func (l *Layer) checkState(st *State) error {
	d := l.Dims
	if len(st.Conv) != d.ConvK*d.ConvDim() || len(st.S) != d.NV*d.DK*d.DV {
		return fmt.Errorf("gateddelta layer: state sizes %d/%d do not match dims %+v", len(st.Conv), len(st.S), d)
	}
	return nil
}

// Conv is step 2: the causal depthwise conv + SiLU over the channels of m,
// continuing st's conv state.
func (l *Layer) Conv(w *Work, st *State, ops Ops, rec tensor.Recorder) error {
	d, t, c := l.Dims, w.T, l.Dims.ConvDim()
	if err := l.checkState(st); err != nil {
		return err
	}
	w.U = w.buf.Get(t * c)
	if err := ops.Conv.Forward(w.U, w.M, l.W.ConvW, conv1d.Dims{T: t, C: c, K: d.ConvK}, st.Conv); err != nil {
		return fmt.Errorf("gateddelta conv: %w", err)
	}
	rec.Record("conv_out", w.U, t, c)
	return nil
}

// Prep is steps 3 to 5: u split into q, k, v; the gates β and g; q̂ and k̂
// L2-normed, q̂ scaled by d_k^−½.
func (l *Layer) Prep(w *Work, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	c, hv := d.ConvDim(), d.NV*d.DV
	u, b, a := w.U, w.B, w.A

	// 3. Split u = [q | k | v] per token (flat layout, docs/spec.md §2.3).
	qk := d.NK * d.DK
	q := w.buf.Get(t * qk)
	k := w.buf.Get(t * qk)
	v := w.buf.Get(t * hv)
	parallel.Rows(t, c, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := u[i*c : (i+1)*c]
			copy(q[i*qk:], row[:qk])
			copy(k[i*qk:], row[qk:2*qk])
			copy(v[i*hv:], row[2*qk:])
		}
	})

	// 4. Gates: β = σ(b); g = −exp(ALog)·softplus(a + DtBias), in fp32.
	beta := w.buf.Get(t * d.NV)
	g := w.buf.Get(t * d.NV)
	decayRate := make([]float32, d.NV) // exp(ALog), per value head
	for j := range decayRate {
		decayRate[j] = float32(math.Exp(float64(l.W.ALog[j])))
	}
	parallel.For(t, max(1, 4096/d.NV), 0, func(_, lo, hi int) { // ≈ 40 ns a value: pieces of ≥ 4096
		for i := lo; i < hi; i++ {
			for j := 0; j < d.NV; j++ {
				n := i*d.NV + j
				beta[n] = act.Sigmoid(b[n])
				g[n] = -decayRate[j] * act.Softplus(a[n]+l.W.DtBias[j])
			}
		}
	})
	rec.Record("g", g, t, d.NV)
	rec.Record("beta", beta, t, d.NV)

	// 5. q̂ = q/√(Σq²+ε), k̂ likewise, then q̂ ← q̂·d_k^−½ (docs/spec.md §3.3, step 5).
	if err := norm.L2Normalize(q, q, d.DK, l2Eps); err != nil {
		return err
	}
	if err := norm.L2Normalize(k, k, d.DK, l2Eps); err != nil {
		return err
	}
	rec.Record("q_l2", q, t, d.NK, d.DK)
	rec.Record("k_l2", k, t, d.NK, d.DK)
	rec.Record("v", v, t, d.NV, d.DV)
	scale := float32(1 / math.Sqrt(float64(d.DK)))
	parallel.Rows(len(q), 1, func(lo, hi int) {
		for i := range q[lo:hi] {
			q[lo+i] *= scale
		}
	})
	w.Q, w.K, w.V, w.G, w.Beta = q, k, v, g, beta
	return nil
}

// Core is step 6, the gated delta rule: decay, delta update, read after
// update, continuing st's recurrent state.
func (l *Layer) Core(w *Work, st *State, ops Ops, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	if err := l.checkState(st); err != nil {
		return err
	}
	w.O = w.buf.Get(t * d.NV * d.DV)
	cd := Dims{T: t, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
	if err := ops.Core.Forward(w.O, w.Q, w.K, w.V, w.G, w.Beta, cd, st.S); err != nil {
		return fmt.Errorf("gateddelta core: %w", err)
	}
	rec.Record("core_out", w.O, t, d.NV, d.DV)
	rec.Record("final_state", st.S, d.NV, d.DK, d.DV)
	return nil
}

// GatedNorm is step 7, per (token, value head): y = w ⊙ norm(o) · SiLU(z).
func (l *Layer) GatedNorm(w *Work, rec tensor.Recorder) error {
	hv := l.Dims.NV * l.Dims.DV
	w.Y = w.buf.Get(w.T * hv)
	if err := norm.GatedRMSNormSiLU(w.Y, w.O, w.Z, l.W.NormW, l.Dims.Eps); err != nil {
		return err
	}
	rec.Record("gated_norm_out", w.Y, w.T, hv)
	return nil
}

// OutProj is step 8: out [T, H] = y W_outᵀ.
func (l *Layer) OutProj(out []float32, w *Work, ops Ops) error {
	if len(out) != w.T*l.Dims.Hidden {
		return fmt.Errorf("gateddelta layer: out has %d values, want T·H = %d", len(out), w.T*l.Dims.Hidden)
	}
	if err := ops.MatMul.MatMulT(out, w.Y, w.T, l.W.OutProj); err != nil {
		return fmt.Errorf("gateddelta out_proj: %w", err)
	}
	return nil
}
