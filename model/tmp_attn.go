package model

import (
	"math"

	"github.com/qwenref/qwenref/layers/attention"
)

// tmpAttention is a stand-in until attention.Naive lands. TODO(remove).
type tmpAttention struct{}

func (tmpAttention) Forward(out, q, k, v []float32, d attention.Dims, scale float32) error {
	if err := d.Check(out, q, k, v); err != nil {
		return err
	}
	grp := d.NH / d.NKV
	s := make([]float64, d.S)
	for t := 0; t < d.T; t++ {
		last := d.S - d.T + t
		for h := 0; h < d.NH; h++ {
			qv := q[(t*d.NH+h)*d.D:][:d.D]
			kh := h / grp
			mx := math.Inf(-1)
			for j := 0; j <= last; j++ {
				kv := k[(j*d.NKV+kh)*d.D:][:d.D]
				var dot float32
				for i := range qv {
					dot += qv[i] * kv[i]
				}
				s[j] = float64(dot * scale)
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := 0; j <= last; j++ {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			o := out[(t*d.NH+h)*d.D:][:d.D]
			clear(o)
			for j := 0; j <= last; j++ {
				p := float32(s[j] / sum)
				vv := v[(j*d.NKV+kh)*d.D:][:d.D]
				for i := range o {
					o[i] += p * vv[i]
				}
			}
		}
	}
	return nil
}
