package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// The layer references: one decoder layer in float64, from the equations
// of docs/spec.md, built on GatedDeltaRule, CausalConvSiLU and Attention.
// Weights are float64 in the checkpoint's layouts (nn.Linear [out, in]).
// Every sequence starts from zero states (a fresh sequence).

// GDNMixerParams are one Gated DeltaNet token mixer's dims and weights.
type GDNMixerParams struct {
	H, NK, NV, DK, DV, K int
	Eps                  float64   // rms_norm_eps of the gated output norm
	QKV                  []float64 // in_proj_qkv [2·NK·DK + NV·DV, H]
	Z                    []float64 // in_proj_z [NV·DV, H]
	B, A                 []float64 // in_proj_b, in_proj_a [NV, H]
	Conv                 []float64 // conv1d [C, K]
	ALog, DtBias         []float64 // [NV]
	Norm                 []float64 // gated norm weight [DV] (plain w, not 1+w)
	Out                  []float64 // out_proj [H, NV·DV]
}

// AttentionMixerParams are one gated attention token mixer's dims and weights.
type AttentionMixerParams struct {
	H, NH, NKV, D int
	Rot           int       // leading dims of each head that RoPE rotates
	Theta, Eps    float64   // rope_theta; rms_norm_eps of q_norm and k_norm
	Q             []float64 // q_proj [NH·2·D, H], per head [query | gate]
	K, V          []float64 // k_proj, v_proj [NKV·D, H]
	O             []float64 // o_proj [H, NH·D]
	QNorm, KNorm  []float64 // [D], (1+w)
}

// DecoderParams are one decoder layer: exactly one mixer, its two (1+w)
// RMSNorms and the SwiGLU MLP.
type DecoderParams struct {
	GDN                 *GDNMixerParams
	Attn                *AttentionMixerParams
	H, I                int
	Eps                 float64
	InputNorm, PostNorm []float64 // [H], (1+w)
	Gate, Up            []float64 // [I, H]
	Down                []float64 // [H, I]
}

// linear is y [T, N] = x [T, K] · Wᵀ with W [N, K].
func linear(x []float64, t int, w []float64, n, k int) []float64 {
	y := make([]float64, t*n)
	for i := 0; i < t; i++ {
		xi := x[i*k : (i+1)*k]
		for j := 0; j < n; j++ {
			var s float64
			for c, wv := range w[j*k : (j+1)*k] {
				s += xi[c] * wv
			}
			y[i*n+j] = s
		}
	}
	return y
}

// rmsNorm normalises each row of dim values: x/√(mean x² + eps) · w,
// with w+1 when onePlus (Qwen's (1+w) norms).
func rmsNorm(x []float64, dim int, w []float64, eps float64, onePlus bool) []float64 {
	y := make([]float64, len(x))
	for r := 0; r < len(x); r += dim {
		var ss float64
		for _, v := range x[r : r+dim] {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+eps)
		for i := 0; i < dim; i++ {
			wi := w[i]
			if onePlus {
				wi++
			}
			y[r+i] = x[r+i] * inv * wi
		}
	}
	return y
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// need checks that each named slice has its length.
func need(op string, cs ...lenCheck) error {
	for _, c := range cs {
		if c.got != c.want {
			return fmt.Errorf("%s: %s has %d values, want %d", op, c.name, c.got, c.want)
		}
	}
	return nil
}

// GDNMixer maps x [T, H] (already input-normed) to the mixer's output
// [T, H] and returns its stages (the names of the layer's recorder).
func GDNMixer(x []float64, t int, p *GDNMixerParams) ([]float64, map[string][]float64, error) {
	if p.NK <= 0 || p.NV%p.NK != 0 || p.DK <= 0 || p.DV <= 0 || p.H <= 0 || p.K <= 0 || t < 0 {
		return nil, nil, fmt.Errorf("gdn layer: bad dims %+v", *p)
	}
	qk, hv := p.NK*p.DK, p.NV*p.DV
	c := 2*qk + hv
	if err := need("gdn layer", lenCheck{"x", len(x), t * p.H}, lenCheck{"QKV", len(p.QKV), c * p.H},
		lenCheck{"Z", len(p.Z), hv * p.H}, lenCheck{"B", len(p.B), p.NV * p.H}, lenCheck{"A", len(p.A), p.NV * p.H},
		lenCheck{"Conv", len(p.Conv), c * p.K}, lenCheck{"ALog", len(p.ALog), p.NV}, lenCheck{"DtBias", len(p.DtBias), p.NV},
		lenCheck{"norm", len(p.Norm), p.DV}, lenCheck{"out_proj", len(p.Out), p.H * hv}); err != nil {
		return nil, nil, err
	}
	st := map[string][]float64{}
	m := linear(x, t, p.QKV, c, p.H)
	z := linear(x, t, p.Z, hv, p.H)
	b := linear(x, t, p.B, p.NV, p.H)
	a := linear(x, t, p.A, p.NV, p.H)
	st["qkv_proj"], st["z_proj"], st["b_proj"], st["a_proj"] = m, z, b, a
	u := make([]float64, t*c)
	if err := CausalConvSiLU(u, m, t, c, p.Conv, p.K, make([]float64, p.K*c)); err != nil {
		return nil, nil, err
	}
	st["conv_out"] = u
	q, k, v := make([]float64, t*qk), make([]float64, t*qk), make([]float64, t*hv)
	for i := 0; i < t; i++ {
		row := u[i*c : (i+1)*c]
		copy(q[i*qk:], row[:qk])
		copy(k[i*qk:], row[qk:2*qk])
		copy(v[i*hv:], row[2*qk:])
	}
	g, beta := make([]float64, t*p.NV), make([]float64, t*p.NV)
	for i := range g {
		j := i % p.NV
		beta[i] = sigmoid(b[i])
		g[i] = -math.Exp(p.ALog[j]) * Softplus(a[i]+p.DtBias[j])
	}
	st["g"], st["beta"] = g, beta
	if err := L2Normalize(q, p.DK, 1e-6); err != nil {
		return nil, nil, err
	}
	if err := L2Normalize(k, p.DK, 1e-6); err != nil {
		return nil, nil, err
	}
	st["q_l2"], st["k_l2"], st["v"] = append([]float64(nil), q...), k, v
	scale := 1 / math.Sqrt(float64(p.DK))
	for i := range q {
		q[i] *= scale
	}
	o, state := make([]float64, t*hv), make([]float64, p.NV*p.DK*p.DV)
	if err := GatedDeltaRule(o, q, k, v, g, beta, gateddelta.Dims{T: t, NK: p.NK, NV: p.NV, DK: p.DK, DV: p.DV}, state); err != nil {
		return nil, nil, err
	}
	st["core_out"], st["final_state"] = o, state
	y := rmsNorm(o, p.DV, p.Norm, p.Eps, false)
	for i := range y {
		y[i] *= SiLU(z[i])
	}
	st["gated_norm_out"] = y
	out := linear(y, t, p.Out, p.H, hv)
	st["mixer_out"] = out
	return out, st, nil
}

// AttentionMixer maps x [T, H] (already input-normed) to the mixer's
// output [T, H] at positions 0..T−1 and returns its stages. RoPE's angles
// are transformers' own: inv_freq and pos·inv_freq in float32, as the
// model defines them; everything after is float64.
func AttentionMixer(x []float64, t int, p *AttentionMixerParams) ([]float64, map[string][]float64, error) {
	if p.NH <= 0 || p.NKV <= 0 || p.NH%p.NKV != 0 || p.D <= 0 || p.Rot < 0 || p.Rot > p.D || p.Rot%2 != 0 || p.H <= 0 || t < 0 {
		return nil, nil, fmt.Errorf("attention layer: bad dims %+v", *p)
	}
	qd, kvd := p.NH*p.D, p.NKV*p.D
	if err := need("attention layer", lenCheck{"x", len(x), t * p.H}, lenCheck{"Q", len(p.Q), 2 * qd * p.H},
		lenCheck{"K", len(p.K), kvd * p.H}, lenCheck{"V", len(p.V), kvd * p.H}, lenCheck{"O", len(p.O), p.H * qd},
		lenCheck{"QNorm", len(p.QNorm), p.D}, lenCheck{"KNorm", len(p.KNorm), p.D}); err != nil {
		return nil, nil, err
	}
	st := map[string][]float64{}
	qg := linear(x, t, p.Q, 2*qd, p.H)
	k := linear(x, t, p.K, kvd, p.H)
	v := linear(x, t, p.V, kvd, p.H)
	st["q_proj"], st["k_proj"], st["v_proj"] = qg, k, v
	q, gate := make([]float64, t*qd), make([]float64, t*qd)
	for i := 0; i < t*p.NH; i++ {
		copy(q[i*p.D:(i+1)*p.D], qg[i*2*p.D:i*2*p.D+p.D])
		copy(gate[i*p.D:(i+1)*p.D], qg[i*2*p.D+p.D:(i+1)*2*p.D])
	}
	q = rmsNorm(q, p.D, p.QNorm, p.Eps, true)
	k = rmsNorm(k, p.D, p.KNorm, p.Eps, true)
	half := p.Rot / 2
	for pos := 0; pos < t; pos++ {
		for i := 0; i < half; i++ {
			inv := 1 / float32(math.Pow(p.Theta, float64(float32(2*i)/float32(p.Rot))))
			phi := float64(float32(pos) * inv)
			c, s := math.Cos(phi), math.Sin(phi)
			rot := func(x []float64, heads int) {
				for h := 0; h < heads; h++ {
					hx := x[(pos*heads+h)*p.D:]
					x1, x2 := hx[i], hx[i+half]
					hx[i], hx[i+half] = x1*c-x2*s, x2*c+x1*s
				}
			}
			rot(q, p.NH)
			rot(k, p.NKV)
		}
	}
	st["q_rope"], st["k_rope"] = q, k
	o := make([]float64, t*qd)
	if err := Attention(o, q, k, v, attention.Dims{T: t, S: t, NH: p.NH, NKV: p.NKV, D: p.D}, 1/math.Sqrt(float64(p.D))); err != nil {
		return nil, nil, err
	}
	st["attn_core"] = append([]float64(nil), o...)
	for i := range o {
		o[i] *= sigmoid(gate[i])
	}
	st["gated"] = o
	out := linear(o, t, p.O, p.H, qd)
	st["mixer_out"] = out
	return out, st, nil
}

// DecoderLayer maps the residual stream x [T, H] to the layer's output:
// h = x + Mixer(RMSNorm₁₊(x)), out = h + MLP(RMSNorm₁₊(h)).
func DecoderLayer(x []float64, t int, p *DecoderParams) ([]float64, map[string][]float64, error) {
	if (p.GDN == nil) == (p.Attn == nil) {
		return nil, nil, fmt.Errorf("decoder layer: exactly one of GDN and Attn must be set")
	}
	if err := need("decoder layer", lenCheck{"x", len(x), t * p.H}, lenCheck{"InputNorm", len(p.InputNorm), p.H},
		lenCheck{"PostNorm", len(p.PostNorm), p.H}, lenCheck{"Gate", len(p.Gate), p.I * p.H},
		lenCheck{"Up", len(p.Up), p.I * p.H}, lenCheck{"Down", len(p.Down), p.H * p.I}); err != nil {
		return nil, nil, err
	}
	normed := rmsNorm(x, p.H, p.InputNorm, p.Eps, true)
	var mix []float64
	var st map[string][]float64
	var err error
	if p.GDN != nil {
		mix, st, err = GDNMixer(normed, t, p.GDN)
	} else {
		mix, st, err = AttentionMixer(normed, t, p.Attn)
	}
	if err != nil {
		return nil, nil, err
	}
	st["mixer_in"] = normed
	h := make([]float64, len(x))
	for i := range h {
		h[i] = x[i] + mix[i]
	}
	n2 := rmsNorm(h, p.H, p.PostNorm, p.Eps, true)
	st["mlp_in"] = n2
	gt := linear(n2, t, p.Gate, p.I, p.H)
	up := linear(n2, t, p.Up, p.I, p.H)
	for i := range gt {
		gt[i] = SiLU(gt[i]) * up[i]
	}
	mlp := linear(gt, t, p.Down, p.H, p.I)
	st["mlp_out"] = mlp
	for i := range h {
		h[i] += mlp[i]
	}
	st["output"] = h
	return h, st, nil
}
