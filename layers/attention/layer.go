package attention

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/layers/act"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// LayerDims are the shapes of one gated attention layer.
type LayerDims struct {
	Hidden    int     // H
	NH, NKV   int     // query heads n_h, key/value heads n_kv
	D         int     // head dim d_h
	RotaryDim int     // leading dims of each head that RoPE rotates (d_h·partial_rotary_factor)
	Theta     float64 // rope_theta
	Eps       float32 // rms_norm_eps of q_norm and k_norm
}

// LayerWeights are one layer's parameters; the tags name the checkpoint
// tensors under `layers.N.self_attn.` with their stored shapes.
type LayerWeights struct {
	QProj *tensor.Matrix `tensor:"q_proj.weight" shape:"2*n_h*d_h,H"` // per head [query | gate] (interleaved)
	KProj *tensor.Matrix `tensor:"k_proj.weight" shape:"n_kv*d_h,H"`
	VProj *tensor.Matrix `tensor:"v_proj.weight" shape:"n_kv*d_h,H"`
	OProj *tensor.Matrix `tensor:"o_proj.weight" shape:"H,n_h*d_h"`
	QNorm []float32      `tensor:"q_norm.weight" shape:"d_h" init:"zero_centred"` // (1+w) scale
	KNorm []float32      `tensor:"k_norm.weight" shape:"d_h" init:"zero_centred"` // (1+w) scale
}

// Ops are the kernels a layer runs on.
type Ops struct {
	MatMul linalg.MatMuler
	Core   Kernel
}

// Cache is one sequence's key/value cache for one attention layer:
// K and V hold Len rows of [n_kv, d_h], keys already normed and rotated.
type Cache struct {
	K, V []float32
	Len  int
}

// Reset empties the cache for a new sequence, keeping its memory.
func (c *Cache) Reset() {
	c.K, c.V, c.Len = c.K[:0], c.V[:0], 0
}

// Layer is one gated full-attention token mixer (Qwen3_5Attention).
type Layer struct {
	Dims LayerDims
	W    LayerWeights
}

// Forward maps x [T, H] (already input-normed) to out [T, H] for one
// sequence whose first new token sits at position cache.Len, appending the
// new keys and values to cache. rec, if not nil, sees every stage.
func (l *Layer) Forward(out, x []float32, t int, cache *Cache, ops Ops, rec tensor.Recorder) error {
	d := l.Dims
	if len(x) != t*d.Hidden || len(out) != t*d.Hidden {
		return fmt.Errorf("attention layer: x has %d and out %d values, want T·H = %d", len(x), len(out), t*d.Hidden)
	}
	qd, kvd := d.NH*d.D, d.NKV*d.D

	// Every work buffer is written in full before it is read; with nothing
	// recorded they come from the pool (internal/bufpool).
	buf := bufpool.New(rec == nil)
	defer buf.Release()

	// 1. Projections. q_proj rows are per head [query (d_h) | gate (d_h)].
	qg := buf.Get(t * 2 * qd)
	k := buf.Get(t * kvd)
	v := buf.Get(t * kvd)
	for _, p := range []struct {
		y    []float32
		w    *tensor.Matrix
		name string
	}{{qg, l.W.QProj, "q_proj"}, {k, l.W.KProj, "k_proj"}, {v, l.W.VProj, "v_proj"}} {
		if err := ops.MatMul.MatMulT(p.y, x, t, p.w); err != nil {
			return fmt.Errorf("attention %s: %w", p.name, err)
		}
		rec.Record(p.name, p.y, t, p.w.Rows)
	}
	q := buf.Get(t * qd)
	gate := buf.Get(t * qd)
	parallel.Rows(t, 2*qd, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for h := 0; h < d.NH; h++ {
				src := qg[(i*d.NH+h)*2*d.D:]
				copy(q[(i*d.NH+h)*d.D:(i*d.NH+h+1)*d.D], src[:d.D])
				copy(gate[(i*d.NH+h)*d.D:(i*d.NH+h+1)*d.D], src[d.D:2*d.D])
			}
		}
	})

	// 2. Per-head RMSNorm with (1+w) on q and k; v has no norm.
	if err := norm.RMSNormOnePlus(q, q, l.W.QNorm, d.Eps); err != nil {
		return err
	}
	if err := norm.RMSNormOnePlus(k, k, l.W.KNorm, d.Eps); err != nil {
		return err
	}

	// 3. Partial rotate-half RoPE at absolute positions cache.Len + i.
	// The angles depend on the position only, so each token's cos and sin
	// are computed once for all n_h + n_kv heads.
	rope := NewRoPE(d.RotaryDim, d.Theta)
	parallel.For(t, 16, 0, func(_, lo, hi int) { // a token's angles cost about 2 µs
		cos, sin := make([]float32, d.RotaryDim/2), make([]float32, d.RotaryDim/2)
		for i := lo; i < hi; i++ {
			rope.Angles(cos, sin, cache.Len+i)
			for h := 0; h < d.NH; h++ {
				rope.Rotate(q[(i*d.NH+h)*d.D:(i*d.NH+h+1)*d.D], cos, sin)
			}
			for h := 0; h < d.NKV; h++ {
				rope.Rotate(k[(i*d.NKV+h)*d.D:(i*d.NKV+h+1)*d.D], cos, sin)
			}
		}
	})
	rec.Record("q_rope", q, t, d.NH, d.D)
	rec.Record("k_rope", k, t, d.NKV, d.D)

	// 4. Append to the cache, then causal softmax attention with GQA.
	cache.K = append(cache.K, k...)
	cache.V = append(cache.V, v...)
	cache.Len += t
	o := buf.Get(t * qd)
	cd := Dims{T: t, S: cache.Len, NH: d.NH, NKV: d.NKV, D: d.D}
	if err := ops.Core.Forward(o, q, cache.K, cache.V, cd, float32(1/math.Sqrt(float64(d.D)))); err != nil {
		return fmt.Errorf("attention core: %w", err)
	}
	rec.Record("attn_core", o, t, d.NH, d.D)

	// 5. Output gate before o_proj: a = o ⊙ σ(gate).
	act.MulSigmoid(o, o, gate)
	rec.Record("gated", o, t, qd)
	if err := ops.MatMul.MatMulT(out, o, t, l.W.OProj); err != nil {
		return fmt.Errorf("attention o_proj: %w", err)
	}
	return nil
}

// RoPE holds the inverse frequencies of a partial rotate-half rotary
// embedding: the first Dim entries of a head rotate, pairing i with
// i+Dim/2; the rest pass through.
type RoPE struct {
	Dim     int
	InvFreq []float32 // θ^(−2i/Dim), i < Dim/2, rounded to float32 as torch does
}

// NewRoPE builds the frequency table for a rotary dim and base θ.
func NewRoPE(dim int, theta float64) *RoPE {
	r := &RoPE{Dim: dim, InvFreq: make([]float32, dim/2)}
	for i := range r.InvFreq {
		// transformers: 1 / base^(arange(0, dim, 2)/dim), computed in float32.
		e := float32(2*i) / float32(dim)
		r.InvFreq[i] = 1 / float32(math.Pow(theta, float64(e)))
	}
	return r
}

// Apply rotates x (one head, len ≥ Dim) in place for position pos:
// x₁' = x₁cos φ − x₂sin φ, x₂' = x₂cos φ + x₁sin φ with φ = pos·inv_freq.
func (r *RoPE) Apply(x []float32, pos int) {
	cos, sin := make([]float32, r.Dim/2), make([]float32, r.Dim/2)
	r.Angles(cos, sin, pos)
	r.Rotate(x, cos, sin)
}

// Angles fills cos and sin (Dim/2 values each) with cos φ and sin φ for
// position pos, φ = pos·inv_freq in float32 as torch's freqs.
func (r *RoPE) Angles(cos, sin []float32, pos int) {
	cos, sin = cos[:len(r.InvFreq)], sin[:len(r.InvFreq)]
	for i, f := range r.InvFreq {
		phi := float64(float32(pos) * f)
		cos[i], sin[i] = float32(math.Cos(phi)), float32(math.Sin(phi))
	}
}

// Rotate rotates x (one head, len ≥ Dim) in place by the angles of one
// position from Angles.
func (r *RoPE) Rotate(x, cos, sin []float32) {
	half := r.Dim / 2
	x1, x2 := x[:half], x[half:2*half]
	cos, sin = cos[:half], sin[:half]
	for i, c := range cos {
		s := sin[i]
		a, b := x1[i], x2[i]
		x1[i] = a*c - b*s
		x2[i] = b*c + a*s
	}
}
