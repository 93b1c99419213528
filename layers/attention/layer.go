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

// Work carries one forward's intermediates from stage to stage, so that
// the stages can also run one at a time, as a block plan walks them
// (model.Plan). Every buffer is written in full before it is read; with
// nothing recorded they come from the pool (internal/bufpool).
type Work struct {
	T       int
	QG      []float32 // [T, n_h·2d_h]: q_proj, per head [query | gate]
	K, V    []float32 // [T, n_kv·d_h]
	Q, Gate []float32 // [T, n_h·d_h]
	O       []float32 // [T, n_h·d_h]: the core's output, then gated
	buf     *bufpool.Buffers
}

// NewWork starts a forward over t tokens; pooled takes its buffers from
// the pool (when nothing keeps them), and Release hands them back.
func (l *Layer) NewWork(t int, pooled bool) *Work { return &Work{T: t, buf: bufpool.New(pooled)} }

// Release returns the work's pooled buffers; it must not be used after.
func (w *Work) Release() { w.buf.Release() }

// Forward maps x [T, H] (already input-normed) to out [T, H] for one
// sequence whose first new token sits at position cache.Len, appending the
// new keys and values to cache. rec, if not nil, sees every stage.
func (l *Layer) Forward(out, x []float32, t int, cache *Cache, ops Ops, rec tensor.Recorder) error {
	if len(out) != t*l.Dims.Hidden { // before the cache grows
		return fmt.Errorf("attention layer: out has %d values, want T·H = %d", len(out), t*l.Dims.Hidden)
	}
	w := l.NewWork(t, rec == nil)
	defer w.Release()
	if err := l.QKV(w, x, ops, rec); err != nil {
		return err
	}
	if err := l.Prep(w, cache.Len, rec); err != nil {
		return err
	}
	if err := l.Core(w, cache, ops, rec); err != nil {
		return err
	}
	return l.OutProj(out, w, ops)
}

// QKV is step 1, the projections. q_proj rows are per head [query (d_h) |
// gate (d_h)].
func (l *Layer) QKV(w *Work, x []float32, ops Ops, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	if len(x) != t*d.Hidden {
		return fmt.Errorf("attention layer: x has %d values, want T·H = %d", len(x), t*d.Hidden)
	}
	qd, kvd := d.NH*d.D, d.NKV*d.D
	w.QG, w.K, w.V = w.buf.Get(t*2*qd), w.buf.Get(t*kvd), w.buf.Get(t*kvd)
	return linalg.Project(ops.MatMul, x, t, rec, "attention",
		linalg.Projection{Y: w.QG, W: l.W.QProj, Name: "q_proj"}, linalg.Projection{Y: w.K, W: l.W.KProj, Name: "k_proj"},
		linalg.Projection{Y: w.V, W: l.W.VProj, Name: "v_proj"})
}

// Prep is steps 2 and 3 for tokens from position pos: the query and gate
// split apart, the per-head RMSNorm with (1+w) on q and k (v has none),
// then partial rotate-half RoPE.
func (l *Layer) Prep(w *Work, pos int, rec tensor.Recorder) error {
	return l.prep(w, func(i int) int { return pos + i }, rec)
}

// prep is Prep with row i at position posOf(i).
func (l *Layer) prep(w *Work, posOf func(i int) int, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	qd := d.NH * d.D
	q, gate, k, qg := w.buf.Get(t*qd), w.buf.Get(t*qd), w.K, w.QG
	parallel.Rows(t, 2*qd, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for h := 0; h < d.NH; h++ {
				src := qg[(i*d.NH+h)*2*d.D:]
				copy(q[(i*d.NH+h)*d.D:(i*d.NH+h+1)*d.D], src[:d.D])
				copy(gate[(i*d.NH+h)*d.D:(i*d.NH+h+1)*d.D], src[d.D:2*d.D])
			}
		}
	})
	if err := norm.RMSNormOnePlus(q, q, l.W.QNorm, d.Eps); err != nil {
		return err
	}
	if err := norm.RMSNormOnePlus(k, k, l.W.KNorm, d.Eps); err != nil {
		return err
	}

	// The angles depend on the position only, so each token's cos and sin
	// are computed once for all n_h + n_kv heads.
	rope := NewRoPE(d.RotaryDim, d.Theta)
	parallel.For(t, 16, 0, func(_, lo, hi int) { // a token's angles cost about 2 µs
		cos, sin := make([]float32, d.RotaryDim/2), make([]float32, d.RotaryDim/2)
		for i := lo; i < hi; i++ {
			rope.Angles(cos, sin, posOf(i))
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
	w.Q, w.Gate = q, gate
	return nil
}

// Core is steps 4 and 5: k and v appended to the cache, causal softmax
// attention with GQA over it, then the output gate a = o ⊙ σ(gate).
func (l *Layer) Core(w *Work, cache *Cache, ops Ops, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	cache.K = append(cache.K, w.K...)
	cache.V = append(cache.V, w.V...)
	cache.Len += t
	w.O = w.buf.Get(t * d.NH * d.D)
	cd := Dims{T: t, S: cache.Len, NH: d.NH, NKV: d.NKV, D: d.D}
	if err := ops.Core.Forward(w.O, w.Q, cache.K, cache.V, cd, float32(1/math.Sqrt(float64(d.D)))); err != nil {
		return fmt.Errorf("attention core: %w", err)
	}
	rec.Record("attn_core", w.O, t, d.NH, d.D)
	act.MulSigmoid(w.O, w.O, w.Gate)
	rec.Record("gated", w.O, t, d.NH*d.D)
	return nil
}

// OutProj is out [T, H] = a W_oᵀ.
func (l *Layer) OutProj(out []float32, w *Work, ops Ops) error {
	if len(out) != w.T*l.Dims.Hidden {
		return fmt.Errorf("attention layer: out has %d values, want T·H = %d", len(out), w.T*l.Dims.Hidden)
	}
	if err := ops.MatMul.MatMulT(out, w.O, w.T, l.W.OProj); err != nil {
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
