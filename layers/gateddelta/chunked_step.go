package gateddelta

// chunkStep advances value head h (reading key head kh) over the C tokens
// starting at t0: spec §4.1 steps 2–5 for one chunk. It expects
// w.gkk = K Kᵀ and w.gqk = Q Kᵀ for this chunk (chunkGroup computes them
// once per key head) and updates the head's state in place.
func (p *problem) chunkStep(w *scratch, kh, h, t0 int) {
	d, C := p.d, p.C
	dk, dv := d.DK, d.DV
	ldqk, ldv, nv := d.NK*dk, d.NV*dv, d.NV
	ldr := dv + dk // row stride of R
	w.gam = growF64(w.gam, C)
	w.eg = grow(w.eg, C)
	w.ek = grow(w.ek, C)
	w.row = grow(w.row, C)
	w.tm = grow(w.tm, C*C)
	w.pm = grow(w.pm, C*C)
	w.rm = grow(w.rm, C*ldr)
	w.uw = grow(w.uw, C*dv)
	w.qt = grow(w.qt, C*dk)
	w.kt = grow(w.kt, C*dk)

	// γ_r = Σ_{i≤r} g_i, the inclusive cumulative log-decay, kept in
	// float64: a strongly decaying chunk reaches γ ≈ −600, where a float32
	// γ would put errors of 4e-5 into every e^{γ_r−γ_s} (torch's float32
	// cumsum does; the chunk's final state then drifts 10× further from the
	// exact recurrence than the per-token kernels).
	var acc float64
	for r := 0; r < C; r++ {
		acc += float64(p.g[(t0+r)*nv+h])
		w.gam[r] = acc
	}
	expAffine(w.eg, w.gam, 0, 1)           // e^{γ_r}
	expAffine(w.ek, w.gam, w.gam[C-1], -1) // e^{γ_C − γ_r}
	lambda := w.eg[C-1]                    // λ = e^{γ_C}, the whole chunk's decay

	// Row r of N = strict_lower(A), A = (K_β Kᵀ) ⊙ Γ, and of
	// P = (Q Kᵀ) ⊙ Γ (diagonal included), with Γ_rs = e^{γ_r − γ_s}. Only
	// s ≤ r is ever exponentiated (the masking before exp of the spec);
	// everything right of the diagonal is stored as an exact zero because
	// the triangular products below read whole 4-row tiles.
	for r := 0; r < C; r++ {
		nb := (r + 16) &^ 15 // columns 0..r, rounded up to a vector
		gr := w.row[:nb]
		expAffine(gr, w.gam[:nb], w.gam[r], -1)
		tr := w.tm[r*C : (r+1)*C]
		pr := w.pm[r*C : (r+1)*C]
		mulScaled(tr[:nb], w.gkk[r*C:r*C+nb], gr, p.beta[(t0+r)*nv+h])
		mulScaled(pr[:nb], w.gqk[r*C:r*C+nb], gr, 1)
		clear(tr[r:])
		clear(pr[r+1:])
	}

	// T = (I + N)⁻¹ by forward substitution, in place over N.
	unitLowerInverse(w.tm, w.row, C)

	// R = [V_β | diag(e^γ) K_β], Q̃ = diag(e^γ) Q, K̃ = diag(e^{γ_C−γ}) K.
	for r := 0; r < C; r++ {
		t := t0 + r
		br := p.beta[t*nv+h]
		kr := p.k[t*ldqk+kh*dk:][:dk]
		rr := w.rm[r*ldr : (r+1)*ldr]
		scaleCopy(rr[:dv], p.v[t*ldv+h*dv:][:dv], br)
		scaleCopy(rr[dv:], kr, br*w.eg[r])
		scaleCopy(w.qt[r*dk:(r+1)*dk], p.q[t*ldqk+kh*dk:][:dk], w.eg[r])
		scaleCopy(w.kt[r*dk:(r+1)*dk], kr, w.ek[r])
	}
	S := p.state[h*dk*dv : (h+1)*dk*dv]
	// V_new = U − W S with U = T V_β and W = T diag(e^γ) K_β is computed
	// as T (V_β − diag(e^γ) K_β S): the same product regrouped, which
	// skips forming W (a C×C by C×d_k product, ~7% of the chunk's work).
	z := w.rm // Z = V_β − diag(e^γ) K_β S, in place over R's V_β half
	gemm(C, dv, dk, -1, w.rm[dv:], ldr, 1, S, dv, 1, z, ldr, triNone)
	vn := w.uw[:C*dv] // V_new = T Z
	gemm(C, dv, C, 1, w.tm, C, 1, z, ldr, 0, vn, dv, triLowerA)
	// O = Q̃ S + P V_new, written straight into this head's output rows.
	o := p.out[t0*ldv+h*dv:]
	gemm(C, dv, dk, 1, w.qt, dk, 1, S, dv, 0, o, ldv, triNone)
	gemm(C, dv, C, 1, w.pm, C, 1, vn, dv, 1, o, ldv, triLowerA)
	// S ← λ S + K̃ᵀ V_new (K̃ read transposed: lda = 1, aks = dk).
	gemm(dk, dv, C, 1, w.kt, 1, dk, vn, dv, lambda, S, dv, triNone)
}
