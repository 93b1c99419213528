package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/attention"
)

// The backward passes of the causal conv + SiLU, the gated RMSNorm and
// the gated attention core, in float64 (docs/learn/06-gradients.md).

// ConvGrads are the gradients of the causal conv + SiLU's inputs: X [T, C],
// W [C, K], Bias [C] (nil without a bias) and State [K, C], the initial
// state's.
type ConvGrads struct {
	X, W, Bias, State []float64
}

// CausalConvSiLUBias is CausalConvSiLU with a per-channel bias added
// before the SiLU (causal-conv1d's bias; nil: none, as in Qwen3.5).
func CausalConvSiLUBias(y, x []float64, t, c int, w []float64, k int, bias, state []float64) error {
	hist, err := convHist(x, t, c, w, k, bias, state)
	if err != nil {
		return err
	}
	if len(y) != t*c {
		return fmt.Errorf("reference conv: y has %d values, want T·C = %d", len(y), t*c)
	}
	for i := range y {
		y[i] = SiLU(convPre(hist, i/c, i%c, c, w, k, bias))
	}
	copy(state, hist[t*c:])
	return nil
}

// convHist checks the conv's arguments and returns [state; x] as one
// [K+T, C] sequence: row K+τ holds the input at time τ.
func convHist(x []float64, t, c int, w []float64, k int, bias, state []float64) ([]float64, error) {
	if t < 0 || c <= 0 || k <= 0 {
		return nil, fmt.Errorf("reference conv: bad dims T=%d C=%d K=%d", t, c, k)
	}
	cs := []lenCheck{{"x", len(x), t * c}, {"w", len(w), c * k}, {"state", len(state), k * c}}
	if bias != nil {
		cs = append(cs, lenCheck{"bias", len(bias), c})
	}
	if err := checkLens("conv", struct{ T, C, K int }{t, c, k}, cs); err != nil {
		return nil, err
	}
	hist := make([]float64, (k+t)*c)
	copy(hist, state)
	copy(hist[k*c:], x)
	return hist, nil
}

// convPre is the pre-activation u[t, ch] = bias[ch] + Σ_j w[ch, j]·hist[t+1+j, ch].
func convPre(hist []float64, t, ch, c int, w []float64, k int, bias []float64) float64 {
	var u float64
	if bias != nil {
		u = bias[ch]
	}
	for j := 0; j < k; j++ {
		u += w[ch*k+j] * hist[(t+1+j)*c+ch]
	}
	return u
}

// siluGrad is SiLU′(u) = σ(u)·(1 + u·(1 − σ(u))).
func siluGrad(u float64) float64 {
	s := sigmoid(u)
	return s * (1 + u*(1-s))
}

// CausalConvSiLUBackward is the gradient of CausalConvSiLUBias: given the
// inputs, the upstream gradient dy [T, C] and dfinal [K, C] of the final
// state (nil: zero), it returns every input's gradient. The final state
// is the last K rows of [state; x], so for T < K its gradient flows back
// into both x and the initial state.
func CausalConvSiLUBackward(x []float64, t, c int, w []float64, k int, bias, state, dy, dfinal []float64) (*ConvGrads, error) {
	hist, err := convHist(x, t, c, w, k, bias, state)
	if err != nil {
		return nil, err
	}
	if len(dy) != t*c || (dfinal != nil && len(dfinal) != k*c) {
		return nil, fmt.Errorf("reference conv backward: dy has %d values (want %d), dfinal %d (want %d or none)", len(dy), t*c, len(dfinal), k*c)
	}
	dh := make([]float64, (k+t)*c) // the gradient of hist
	if dfinal != nil {
		for i, v := range dfinal {
			dh[t*c+i] += v
		}
	}
	gr := &ConvGrads{W: make([]float64, c*k)}
	if bias != nil {
		gr.Bias = make([]float64, c)
	}
	for ti := 0; ti < t; ti++ {
		for ch := 0; ch < c; ch++ {
			du := dy[ti*c+ch] * siluGrad(convPre(hist, ti, ch, c, w, k, bias))
			if bias != nil {
				gr.Bias[ch] += du
			}
			for j := 0; j < k; j++ {
				r := (ti+1+j)*c + ch
				gr.W[ch*k+j] += hist[r] * du
				dh[r] += w[ch*k+j] * du
			}
		}
	}
	gr.State, gr.X = dh[:k*c], dh[k*c:]
	return gr, nil
}

// GatedRMSNorm is the gated output norm of a Gated DeltaNet layer, per row
// of dim values: y = x/√(mean x² + eps) · w · SiLU(z), with a plain w.
func GatedRMSNorm(x, z, w []float64, dim int, eps float64) ([]float64, error) {
	if err := checkNorm(x, z, w, nil, dim); err != nil {
		return nil, err
	}
	y := rmsNorm(x, dim, w, eps, false)
	for i := range y {
		y[i] *= SiLU(z[i])
	}
	return y, nil
}

// GatedRMSNormBackward is the gradient of GatedRMSNorm for upstream dy:
// with n = x·r, r = 1/√(mean x² + eps) and dn = dy·w·SiLU(z), per row
// dx = r·(dn − n·mean(dn·n)), dz = dy·n·w·SiLU′(z), dw = Σ_rows dy·n·SiLU(z).
func GatedRMSNormBackward(x, z, w []float64, dim int, eps float64, dy []float64) (dx, dz, dw []float64, err error) {
	if err := checkNorm(x, z, w, dy, dim); err != nil {
		return nil, nil, nil, err
	}
	dx, dz, dw = make([]float64, len(x)), make([]float64, len(x)), make([]float64, dim)
	n, dn := make([]float64, dim), make([]float64, dim)
	for r0 := 0; r0 < len(x); r0 += dim {
		var ss float64
		for _, v := range x[r0 : r0+dim] {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+eps)
		var m float64
		for i := 0; i < dim; i++ {
			n[i] = x[r0+i] * inv
			sz := SiLU(z[r0+i])
			dn[i] = dy[r0+i] * w[i] * sz
			dz[r0+i] = dy[r0+i] * n[i] * w[i] * siluGrad(z[r0+i])
			dw[i] += dy[r0+i] * n[i] * sz
			m += dn[i] * n[i]
		}
		m /= float64(dim)
		for i := 0; i < dim; i++ {
			dx[r0+i] = inv * (dn[i] - n[i]*m)
		}
	}
	return dx, dz, dw, nil
}

func checkNorm(x, z, w, dy []float64, dim int) error {
	if dim <= 0 || len(x)%dim != 0 || len(z) != len(x) || len(w) != dim || (dy != nil && len(dy) != len(x)) {
		return fmt.Errorf("reference gated norm: x %d, z %d, w %d, dy %d values do not fit rows of %d", len(x), len(z), len(w), len(dy), dim)
	}
	return nil
}

// AttentionGrads are the gradients of the gated attention core's inputs:
// Q and Gate [T, NH, D], K and V [S, NKV, D] (Gate nil without a gate).
type AttentionGrads struct {
	Q, K, V, Gate []float64
}

// GatedAttention is Attention followed by the layer's sigmoid output gate:
// out = σ(gate) ⊙ softmax(q·kᵀ·scale)·v, with gate [T, NH, D] (nil: none).
func GatedAttention(out, q, k, v, gate []float64, d attention.Dims, scale float64) error {
	if gate != nil && len(gate) != len(out) {
		return fmt.Errorf("reference attention: gate has %d values, want %d", len(gate), len(out))
	}
	if err := Attention(out, q, k, v, d, scale); err != nil {
		return err
	}
	for i := range gate {
		out[i] *= sigmoid(gate[i])
	}
	return nil
}

// GatedAttentionBackward is the gradient of GatedAttention for upstream
// dout: per query row, with P the softmax row and o = P·V the core output,
//
//	∂o = dout ⊙ σ(gate),  dgate = dout ⊙ o ⊙ σ′(gate),  dV += Pᵀ ∂o,
//	∂P_j = ∂o·v_j,  ∂s_j = P_j (∂P_j − Σ_l P_l ∂P_l),
//	dq = scale Σ_j ∂s_j k_j,  dk_j += scale ∂s_j q.
func GatedAttentionBackward(q, k, v, gate []float64, d attention.Dims, scale float64, dout []float64) (*AttentionGrads, error) {
	if gate != nil && len(gate) != len(q) || len(dout) != len(q) {
		return nil, fmt.Errorf("reference attention backward: gate has %d and dout %d values, want %d", len(gate), len(dout), len(q))
	}
	core := make([]float64, len(q))
	if err := Attention(core, q, k, v, d, scale); err != nil {
		return nil, err
	}
	gr := &AttentionGrads{Q: make([]float64, len(q)), K: make([]float64, len(k)), V: make([]float64, len(v))}
	do := append([]float64(nil), dout...)
	if gate != nil {
		gr.Gate = make([]float64, len(gate))
		for i, x := range gate {
			s := sigmoid(x)
			gr.Gate[i] = dout[i] * core[i] * s * (1 - s)
			do[i] *= s
		}
	}
	grp := d.NH / d.NKV
	p, dp := make([]float64, d.S), make([]float64, d.S)
	for t := 0; t < d.T; t++ {
		last := d.S - d.T + t
		for h := 0; h < d.NH; h++ {
			qv, kh := q[(t*d.NH+h)*d.D:][:d.D], h/grp
			dov, dq := do[(t*d.NH+h)*d.D:][:d.D], gr.Q[(t*d.NH+h)*d.D:][:d.D]
			mx := math.Inf(-1)
			for j := 0; j <= last; j++ {
				p[j] = scale * dotF(qv, k[(j*d.NKV+kh)*d.D:][:d.D])
				mx = math.Max(mx, p[j])
			}
			var sum float64
			for j := 0; j <= last; j++ {
				p[j] = math.Exp(p[j] - mx)
				sum += p[j]
			}
			var pdp float64
			for j := 0; j <= last; j++ {
				p[j] /= sum
				dp[j] = dotF(dov, v[(j*d.NKV+kh)*d.D:][:d.D])
				pdp += p[j] * dp[j]
			}
			for j := 0; j <= last; j++ {
				ds := scale * p[j] * (dp[j] - pdp)
				kv, dk, dv := k[(j*d.NKV+kh)*d.D:][:d.D], gr.K[(j*d.NKV+kh)*d.D:][:d.D], gr.V[(j*d.NKV+kh)*d.D:][:d.D]
				for i := range dq {
					dq[i] += ds * kv[i]
					dk[i] += ds * qv[i]
					dv[i] += p[j] * dov[i]
				}
			}
		}
	}
	return gr, nil
}

func dotF(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
