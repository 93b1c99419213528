package attention

import "math"

// Naive is the reference attention core: for each query and head it builds
// the whole causal score row, takes an fp32 softmax and sums the values.
// Memory is O(S) per row; it is slow and obviously right.
type Naive struct{}

// Forward implements Kernel.
func (Naive) Forward(out, q, k, v []float32, d Dims, scale float32) error {
	if err := d.Check(out, q, k, v); err != nil {
		return err
	}
	group := d.NH / d.NKV // query heads per KV head (docs/spec.md §5 step 4: 24/4 = 6 in the 27B)
	p := make([]float32, d.S)
	for t := range d.T {
		// Query t sits at absolute position S−T+t (the cache holds S−T
		// earlier tokens) and, causally, sees keys 0..S−T+t.
		last := d.S - d.T + t
		for h := range d.NH {
			g := h / group // GQA: transformers' repeat_kv
			qh := q[(t*d.NH+h)*d.D : (t*d.NH+h+1)*d.D]

			// s_j = scale · q·k_j, and the row maximum.
			mx := float32(math.Inf(-1))
			for j := 0; j <= last; j++ {
				kj := k[(j*d.NKV+g)*d.D : (j*d.NKV+g+1)*d.D]
				var s float32
				for i, qi := range qh {
					s += qi * kj[i]
				}
				p[j] = scale * s
				mx = max(mx, p[j])
			}
			// fp32 softmax; subtracting the max keeps every exp ≤ 1.
			var sum float32
			for j := 0; j <= last; j++ {
				p[j] = float32(math.Exp(float64(p[j] - mx)))
				sum += p[j]
			}
			// out = Σ_j p_j v_j with p_j normalised.
			o := out[(t*d.NH+h)*d.D : (t*d.NH+h+1)*d.D]
			clear(o)
			for j := 0; j <= last; j++ {
				pj := p[j] / sum
				vj := v[(j*d.NKV+g)*d.D : (j*d.NKV+g+1)*d.D]
				for i, vi := range vj {
					o[i] += pj * vi
				}
			}
		}
	}
	return nil
}
