package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/attention"
)

// Attention is causal softmax attention for one sequence in float64, with
// the layouts of attention.Kernel:
//
//   - q [T, NH, D]: queries (after q_norm and RoPE in the model);
//   - k, v [S, NKV, D]: the whole cache, past then new, so query t sits at
//     absolute position S−T+t and sees keys 0..S−T+t;
//   - out [T, NH, D] = softmax(q·kᵀ·scale)·v per head, with query head h
//     reading KV head h/(NH/NKV).
func Attention(out, q, k, v []float64, d attention.Dims, scale float64) error {
	if d.T < 0 || d.S < d.T || d.NH <= 0 || d.NKV <= 0 || d.D <= 0 {
		return fmt.Errorf("reference: bad attention dims %+v", d)
	}
	if d.NH%d.NKV != 0 {
		return fmt.Errorf("reference: query heads %d not a multiple of KV heads %d", d.NH, d.NKV)
	}
	if err := checkLens("attention", d, []lenCheck{
		{"q", len(q), d.T * d.NH * d.D}, {"out", len(out), d.T * d.NH * d.D},
		{"k", len(k), d.S * d.NKV * d.D}, {"v", len(v), d.S * d.NKV * d.D},
	}); err != nil {
		return err
	}
	grp := d.NH / d.NKV
	p := make([]float64, d.S)
	for t := 0; t < d.T; t++ {
		last := d.S - d.T + t // the newest key this query may see
		for h := 0; h < d.NH; h++ {
			qv := q[(t*d.NH+h)*d.D:][:d.D]
			kh := h / grp
			// Scores, then a max-shifted softmax (the shift changes nothing
			// mathematically and keeps exp from overflowing).
			mx := math.Inf(-1)
			for j := 0; j <= last; j++ {
				kv := k[(j*d.NKV+kh)*d.D:][:d.D]
				var s float64
				for i := range qv {
					s += qv[i] * kv[i]
				}
				p[j] = s * scale
				mx = math.Max(mx, p[j])
			}
			var sum float64
			for j := 0; j <= last; j++ {
				p[j] = math.Exp(p[j] - mx)
				sum += p[j]
			}
			o := out[(t*d.NH+h)*d.D:][:d.D]
			clear(o)
			for j := 0; j <= last; j++ {
				w := p[j] / sum
				vv := v[(j*d.NKV+kh)*d.D:][:d.D]
				for i := range o {
					o[i] += w * vv[i]
				}
			}
		}
	}
	return nil
}
