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

// Forward maps x [T, H] (already input-normed) to out [T, H] for one
// sequence, reading and advancing st. rec, if not nil, sees every stage.
func (l *Layer) Forward(out, x []float32, t int, st *State, ops Ops, rec tensor.Recorder) error {
	d := l.Dims
	c, hv := d.ConvDim(), d.NV*d.DV
	if len(x) != t*d.Hidden || len(out) != t*d.Hidden {
		return fmt.Errorf("gateddelta layer: x has %d and out %d values, want T·H = %d", len(x), len(out), t*d.Hidden)
	}
	if len(st.Conv) != d.ConvK*c || len(st.S) != d.NV*d.DK*d.DV {
		return fmt.Errorf("gateddelta layer: state sizes %d/%d do not match dims %+v", len(st.Conv), len(st.S), d)
	}

	// Every work buffer is written in full before it is read; with nothing
	// recorded they come from the pool (internal/bufpool).
	buf := bufpool.New(rec == nil)
	defer buf.Release()

	// 1. Projections: m = x W_qkvᵀ, z = x W_zᵀ, b = x W_bᵀ, a = x W_aᵀ.
	m := buf.Get(t * c)
	z := buf.Get(t * hv)
	b := buf.Get(t * d.NV)
	a := buf.Get(t * d.NV)
	for _, p := range []struct {
		y    []float32
		w    *tensor.Matrix
		name string
	}{{m, l.W.InProjQKV, "qkv_proj"}, {z, l.W.InProjZ, "z_proj"}, {b, l.W.InProjB, "b_proj"}, {a, l.W.InProjA, "a_proj"}} {
		if err := ops.MatMul.MatMulT(p.y, x, t, p.w); err != nil {
			return fmt.Errorf("gateddelta %s: %w", p.name, err)
		}
		rec.Record(p.name, p.y, t, p.w.Rows)
	}

	// 2. Causal depthwise conv + SiLU over the channels of m.
	u := buf.Get(t * c)
	if err := ops.Conv.Forward(u, m, t, c, l.W.ConvW, d.ConvK, st.Conv); err != nil {
		return fmt.Errorf("gateddelta conv: %w", err)
	}
	rec.Record("conv_out", u, t, c)

	// 3. Split u = [q | k | v] per token (flat layout, docs/spec.md §2.3).
	qk := d.NK * d.DK
	q := buf.Get(t * qk)
	k := buf.Get(t * qk)
	v := buf.Get(t * hv)
	parallel.Rows(t, c, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := u[i*c : (i+1)*c]
			copy(q[i*qk:], row[:qk])
			copy(k[i*qk:], row[qk:2*qk])
			copy(v[i*hv:], row[2*qk:])
		}
	})

	// 4. Gates: β = σ(b); g = −exp(ALog)·softplus(a + DtBias), in fp32.
	beta := buf.Get(t * d.NV)
	g := buf.Get(t * d.NV)
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

	// 6. The gated delta rule core: decay, delta update, read after update.
	o := buf.Get(t * hv)
	cd := Dims{T: t, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
	if err := ops.Core.Forward(o, q, k, v, g, beta, cd, st.S); err != nil {
		return fmt.Errorf("gateddelta core: %w", err)
	}
	rec.Record("core_out", o, t, d.NV, d.DV)
	rec.Record("final_state", st.S, d.NV, d.DK, d.DV)

	// 7. Gated RMSNorm per (token, value head): w ⊙ norm(o) · SiLU(z).
	y := buf.Get(t * hv)
	if err := norm.GatedRMSNormSiLU(y, o, z, l.W.NormW, d.Eps); err != nil {
		return err
	}
	rec.Record("gated_norm_out", y, t, hv)

	// 8. out = y W_outᵀ.
	if err := ops.MatMul.MatMulT(out, y, t, l.W.OutProj); err != nil {
		return fmt.Errorf("gateddelta out_proj: %w", err)
	}
	return nil
}
