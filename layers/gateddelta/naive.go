package gateddelta

import "math"

// Naive is the readable reference: the per-token recurrence of docs/spec.md §3.3
// step 6 (and §4.2), one value head and one token at a time, in float32
// with plain loops. It is slow (it streams the whole d_k×d_v state four
// times per token) and exists to be read and to check the fast kernels.
type Naive struct{}

// Forward implements Kernel. See Kernel for the layouts.
func (Naive) Forward(out, q, k, v, g, beta []float32, d Dims, state []float32) error {
	if err := d.Check(out, q, k, v, g, beta, state); err != nil {
		return err
	}
	dk, dv := d.DK, d.DV
	r := d.NV / d.NK // value heads per key head (GQA ratio)
	y := make([]float32, dv)
	for j := 0; j < d.NV; j++ {
		// S is this head's d_k×d_v state, row-major: S[i*dv+c] is S[i][c].
		S := state[j*dk*dv : (j+1)*dk*dv]
		kh := j / r // repeat_interleave: value head j reads key head ⌊j/r⌋
		for t := 0; t < d.T; t++ {
			qh := q[(t*d.NK+kh)*dk:][:dk] // q̂_t (already normalised and scaled)
			kt := k[(t*d.NK+kh)*dk:][:dk] // k̂_t
			vt := v[(t*d.NV+j)*dv:][:dv]  // v_t
			bt := beta[t*d.NV+j]          // β_t
			// α_t = exp(g_t), computed in float64 and rounded once.
			alpha := float32(math.Exp(float64(g[t*d.NV+j])))

			// S′ = α_t S_{t−1}: decay first.
			for i := range S {
				S[i] *= alpha
			}
			// y = S′ᵀ k̂_t, the value the state currently predicts for k̂_t.
			clear(y)
			for i := 0; i < dk; i++ {
				ki := kt[i]
				row := S[i*dv : (i+1)*dv]
				for c := range y {
					y[c] += ki * row[c]
				}
			}
			// δ_t = β_t (v_t − S′ᵀ k̂_t): the scaled prediction error.
			for c := range y {
				y[c] = bt * (vt[c] - y[c])
			}
			// S_t = S′ + k̂_t δ_tᵀ: a rank-one write.
			for i := 0; i < dk; i++ {
				ki := kt[i]
				row := S[i*dv : (i+1)*dv]
				for c := range row {
					row[c] += ki * y[c]
				}
			}
			// o_t = S_tᵀ q̂_t: read after the update, so token t sees itself.
			ot := out[(t*d.NV+j)*dv:][:dv]
			clear(ot)
			for i := 0; i < dk; i++ {
				qi := qh[i]
				row := S[i*dv : (i+1)*dv]
				for c := range ot {
					ot[c] += qi * row[c]
				}
			}
		}
	}
	return nil
}
