package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// qwenref's built-in float32 backward passes, the ones `qwenref check
// --grad` runs when no plug-in is named: plain float32 loops written from
// the math of gradops.go and gdngrad.go, computed in float32 throughout
// (not the float64 reference rounded), so checking them against a
// gradient golden tests them. Each handles one sequence and writes every
// gradient in full; the signatures are those of verify.Backward.

// GDNBackwardF32 is the gated delta rule's backward for one sequence in
// float32 (q and k as the core takes them), writing dq, dk, dv, dg, dβ and
// the initial state's gradient dstate. dfinal nil is a zero gradient.
func GDNBackwardF32(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal []float32, d gateddelta.Dims) error {
	if err := checkGDNDims(d); err != nil {
		return err
	}
	if err := d.Check(dout, q, k, v, g, beta, state); err != nil {
		return err
	}
	if err := d.Check(dout, dq, dk, dv, dg, dbeta, dstate); err != nil {
		return fmt.Errorf("gdn-core backward gradients: %w", err)
	}
	if dfinal != nil && len(dfinal) != len(state) {
		return fmt.Errorf("gdn-core backward: dfinal has %d values, want %d", len(dfinal), len(state))
	}
	r := gdnBackward(q, k, v, g, beta, d, state, dout, dfinal, nil)
	for i, dst := range [][]float32{dq, dk, dv, dg, dbeta, dstate} {
		copy(dst, r[i])
	}
	return nil
}

// ConvBackwardF32 is the causal conv + SiLU's backward for one sequence in
// float32: x and dy [T, C], w [C, K], bias [C] (nil: none, and dbias is
// not written), state and dfinal [K, C] (dfinal nil: zero). dw and dbias
// are this sequence's alone (overwritten, not accumulated).
func ConvBackwardF32(dx, dw, dbias, dstate, x []float32, t, c int, w []float32, k int, bias, state, dy, dfinal []float32) error {
	if t < 1 || c < 1 || k < 1 || t > 1<<30 || c > 1<<20 || k > 1<<10 {
		return fmt.Errorf("conv backward: bad dims T=%d C=%d K=%d", t, c, k)
	}
	for _, l := range []lenCheck{{"x", len(x), t * c}, {"dy", len(dy), t * c}, {"dx", len(dx), t * c}, {"w", len(w), c * k},
		{"dw", len(dw), c * k}, {"state", len(state), k * c}, {"dstate", len(dstate), k * c}} {
		if l.got != l.want {
			return fmt.Errorf("conv backward: %s has %d values, want %d for T=%d C=%d K=%d", l.name, l.got, l.want, t, c, k)
		}
	}
	if bias != nil && (len(bias) != c || len(dbias) != c) || dfinal != nil && len(dfinal) != k*c {
		return fmt.Errorf("conv backward: bias %d, dbias %d, dfinal %d values, want %d, %d and %d", len(bias), len(dbias), len(dfinal), c, c, k*c)
	}
	hist := make([]float32, (k+t)*c) // [state; x]: row K+τ is the input at τ
	copy(hist, state)
	copy(hist[k*c:], x)
	dh := make([]float32, (k+t)*c)
	copy(dh[t*c:], dfinal) // the final state is the last K rows of hist
	clear(dw)
	if bias != nil {
		clear(dbias)
	}
	for ti := 0; ti < t; ti++ {
		for ch := 0; ch < c; ch++ {
			var u float32
			if bias != nil {
				u = bias[ch]
			}
			for j := 0; j < k; j++ {
				u += w[ch*k+j] * hist[(ti+1+j)*c+ch]
			}
			s := sigmoid32(u)
			du := dy[ti*c+ch] * s * (1 + u*(1-s))
			if bias != nil {
				dbias[ch] += du
			}
			for j := 0; j < k; j++ {
				r := (ti+1+j)*c + ch
				dw[ch*k+j] += hist[r] * du
				dh[r] += w[ch*k+j] * du
			}
		}
	}
	copy(dstate, dh[:k*c])
	copy(dx, dh[k*c:])
	return nil
}

// AttentionBackwardF32 is the gated attention core's backward in float32
// (GatedAttentionBackward's equations): q, gate, dout [T, NH, D], k, v
// [S, NKV, D]; gate nil is no gate (dgate not written).
func AttentionBackwardF32(dq, dk, dv, dgate, q, k, v, gate, dout []float32, d attention.Dims, scale float32) error {
	if err := d.Check(dout, q, k, v); err != nil {
		return err
	}
	if err := d.Check(dq, dout, dk, dv); err != nil {
		return fmt.Errorf("attention backward gradients: %w", err)
	}
	if gate != nil && (len(gate) != len(q) || len(dgate) != len(q)) {
		return fmt.Errorf("attention backward: gate has %d and dgate %d values, want %d", len(gate), len(dgate), len(q))
	}
	clear(dq)
	clear(dk)
	clear(dv)
	do := append([]float32(nil), dout...) // the core output's gradient
	grp := d.NH / d.NKV
	p, dp := make([]float32, d.S), make([]float32, d.S)
	core := make([]float32, d.D)
	for t := 0; t < d.T; t++ {
		last := d.S - d.T + t
		for h := 0; h < d.NH; h++ {
			row := (t*d.NH + h) * d.D
			qv, kh := q[row:][:d.D], h/grp
			mx := float32(math.Inf(-1))
			for j := 0; j <= last; j++ {
				p[j] = scale * dot32(qv, k[(j*d.NKV+kh)*d.D:][:d.D])
				mx = max(mx, p[j])
			}
			var sum float32
			for j := 0; j <= last; j++ {
				p[j] = float32(math.Exp(float64(p[j] - mx)))
				sum += p[j]
			}
			clear(core)
			for j := 0; j <= last; j++ {
				p[j] /= sum
				for i, x := range v[(j*d.NKV+kh)*d.D:][:d.D] {
					core[i] += p[j] * x
				}
			}
			dov := do[row:][:d.D]
			if gate != nil {
				for i := range dov {
					s := sigmoid32(gate[row+i])
					dgate[row+i] = dov[i] * core[i] * s * (1 - s)
					dov[i] *= s
				}
			}
			var pdp float32
			for j := 0; j <= last; j++ {
				dp[j] = dot32(dov, v[(j*d.NKV+kh)*d.D:][:d.D])
				pdp += p[j] * dp[j]
			}
			dqv := dq[row:][:d.D]
			for j := 0; j <= last; j++ {
				ds := scale * p[j] * (dp[j] - pdp)
				at := (j*d.NKV + kh) * d.D
				kv, dkv, dvv := k[at:][:d.D], dk[at:][:d.D], dv[at:][:d.D]
				for i := range dqv {
					dqv[i] += ds * kv[i]
					dkv[i] += ds * qv[i]
					dvv[i] += p[j] * dov[i]
				}
			}
		}
	}
	return nil
}

// GatedRMSNormBackwardF32 is the gated RMSNorm's backward in float32
// (GatedRMSNormBackward's equations) over rows of dim values: dx and dz
// like x, dw [dim] summed over the rows (overwritten).
func GatedRMSNormBackwardF32(dx, dz, dw, x, z, w, dy []float32, dim int, eps float32) error {
	if dim <= 0 || len(x)%dim != 0 || len(z) != len(x) || len(dy) != len(x) || len(dx) != len(x) || len(dz) != len(x) ||
		len(w) != dim || len(dw) != dim {
		return fmt.Errorf("gated rmsnorm backward: x %d, z %d, dy %d, dx %d, dz %d, w %d, dw %d values do not fit rows of %d",
			len(x), len(z), len(dy), len(dx), len(dz), len(w), len(dw), dim)
	}
	clear(dw)
	n, dn := make([]float32, dim), make([]float32, dim)
	for r0 := 0; r0 < len(x); r0 += dim {
		var ss float32
		for _, v := range x[r0 : r0+dim] {
			ss += v * v
		}
		inv := 1 / float32(math.Sqrt(float64(ss/float32(dim)+eps)))
		var m float32
		for i := 0; i < dim; i++ {
			zi := z[r0+i]
			s := sigmoid32(zi)
			n[i] = x[r0+i] * inv
			dn[i] = dy[r0+i] * w[i] * zi * s
			dz[r0+i] = dy[r0+i] * n[i] * w[i] * s * (1 + zi*(1-s))
			dw[i] += dy[r0+i] * n[i] * zi * s
			m += dn[i] * n[i]
		}
		m /= float32(dim)
		for i := 0; i < dim; i++ {
			dx[r0+i] = inv * (dn[i] - n[i]*m)
		}
	}
	return nil
}

func sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func dot32(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
