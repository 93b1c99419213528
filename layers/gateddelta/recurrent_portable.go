package gateddelta

// recPortableWidth is the column block of the portable recurrence: 32
// columns keep δ′, o and y (three 128-byte rows) and a 16 KiB block of a
// 128-row state in L1.
const recPortableWidth = 32

// recBlockPortable runs the fused recurrence (see recurrentGroup) over all
// n tokens for one column block of w ≤ recPortableWidth state columns: s
// is the dk×w block (row stride lds), q/k rows have stride ldqk, v/out rows
// have stride ldv and start at this block's first column.
//
// Each pass over the state takes two rows at a time, so the running o and
// y rows are loaded and stored once per two state rows.
func recBlockPortable(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	var yb, ob, db [recPortableWidth]float32
	y, o, dl := yb[:w], ob[:w], db[:w]
	// Prologue: y = S̃ᵀ k̂ for the first token, four rows per pass over y.
	i := 0
	for ; i+4 <= dk; i += 4 {
		r0 := s[i*lds : i*lds+w]
		r1 := s[(i+1)*lds : (i+1)*lds+w][:len(r0)]
		r2 := s[(i+2)*lds : (i+2)*lds+w][:len(r0)]
		r3 := s[(i+3)*lds : (i+3)*lds+w][:len(r0)]
		k0, k1, k2, k3 := k[i], k[i+1], k[i+2], k[i+3]
		yy := y[:len(r0)]
		for j := range r0 {
			yy[j] += k0*r0[j] + k1*r1[j] + k2*r2[j] + k3*r3[j]
		}
	}
	for ; i < dk; i++ {
		axpyPortable(y, k[i], s[i*lds:i*lds+w])
	}
	for t := 0; t < n; t++ {
		// δ′ = β(v − c′·y)/c: the prediction error, in S̃'s scale.
		vt := v[t*ldv : t*ldv+w]
		ys, bd := sc.yScale[t], sc.betaD[t]
		for j := range dl {
			dl[j] = (vt[j] - ys*y[j]) * bd
		}
		rho := sc.rho[t]
		kt, qt := k[t*ldqk:t*ldqk+dk], q[t*ldqk:t*ldqk+dk]
		kn := kt // the next token's key; unused on the last token
		last := t+1 == n
		if !last {
			kn = k[(t+1)*ldqk : (t+1)*ldqk+dk]
		}
		clear(o)
		clear(y)
		i := 0
		for ; i+2 <= dk; i += 2 {
			r0 := s[i*lds : i*lds+w]
			r1 := s[(i+1)*lds : (i+1)*lds+w]
			k0, k1, q0, q1 := kt[i], kt[i+1], qt[i], qt[i+1]
			n0, n1 := kn[i], kn[i+1]
			r1 = r1[:len(r0)]
			d := dl[:len(r0)]
			oo, yy := o[:len(r0)], y[:len(r0)]
			for j := range r0 {
				s0 := rho*r0[j] + k0*d[j] // S̃ ← ρS̃ + k̂ δ′ᵀ
				s1 := rho*r1[j] + k1*d[j]
				r0[j], r1[j] = s0, s1
				oo[j] += q0*s0 + q1*s1 // o = S̃ᵀ q̂
				yy[j] += n0*s0 + n1*s1 // the next token's S̃ᵀ k̂
			}
		}
		for ; i < dk; i++ {
			r0 := s[i*lds : i*lds+w]
			k0, q0, n0 := kt[i], qt[i], kn[i]
			d := dl[:len(r0)]
			oo, yy := o[:len(r0)], y[:len(r0)]
			for j := range r0 {
				s0 := rho*r0[j] + k0*d[j]
				r0[j] = s0
				oo[j] += q0 * s0
				yy[j] += n0 * s0
			}
		}
		os := sc.oScale[t]
		ot := out[t*ldv : t*ldv+w]
		for j := range ot {
			ot[j] = os * o[j]
		}
	}
}
