package gateddelta

// chunkStep advances value head h over the C tokens
// starting at t0: spec §4.1 steps 2–5 for one chunk. It expects
// w.kc, w.qc = the chunk's K and Q rows (contiguous), w.gkk = K Kᵀ and
// w.gqk = Q Kᵀ (chunkGroup prepares them once per key head), and updates
// the head's state in place.
func (p *problem) chunkStep(w *scratch, h, t0 int) {
	d, C := p.d, p.C
	dk, dv := d.DK, d.DV
	ldv, nv := d.NV*dv, d.NV
	w.gam = growF64(w.gam, C)
	w.eg = grow(w.eg, C)
	w.ek = grow(w.ek, C)
	w.row = grow(w.row, C)
	w.tm = grow(w.tm, C*C)
	w.pm = grow(w.pm, C*C)
	w.bg = grow(w.bg, C)
	w.rm = grow(w.rm, C*dv)
	w.uw = grow(w.uw, C*dv)
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

	// V_β = diag(β) V and K̃ = diag(e^{γ_C−γ}) K are built as scaled
	// copies; the other diagonal factors (e^γ on Q, β e^γ on K) are row
	// scales of products, applied as those products are written back.
	for r := 0; r < C; r++ {
		t := t0 + r
		br := p.beta[t*nv+h]
		w.bg[r] = br * w.eg[r]
		scaleCopy(w.rm[r*dv:(r+1)*dv], p.v[t*ldv+h*dv:][:dv], br)
		scaleCopy(w.kt[r*dk:(r+1)*dk], w.kc[r*dk:(r+1)*dk], w.ek[r])
	}
	S := p.state[h*dk*dv : (h+1)*dk*dv]
	// V_new = U − W S with U = T V_β and W = T diag(e^γ) K_β is computed
	// as T (V_β − diag(β e^γ) K S): the same product regrouped, which
	// skips forming W (a C×C by C×d_k product, ~7% of the chunk's work).
	z := w.rm // Z = V_β − diag(β e^γ) K S, in place over V_β
	gemm(C, dv, dk, -1, w.kc, dk, 1, S, dv, 1, z, dv, triNone, w.bg)
	vn := w.uw // V_new = T Z
	gemm(C, dv, C, 1, w.tm, C, 1, z, dv, 0, vn, dv, triLowerA, nil)
	// O = diag(e^γ) Q S + P V_new, written straight into this head's
	// output rows.
	o := p.out[t0*ldv+h*dv:]
	gemm(C, dv, dk, 1, w.qc, dk, 1, S, dv, 0, o, ldv, triNone, w.eg)
	gemm(C, dv, C, 1, w.pm, C, 1, vn, dv, 1, o, ldv, triLowerA, nil)
	// S ← λ S + K̃ᵀ V_new (K̃ read transposed: lda = 1, aks = dk).
	gemm(dk, dv, C, 1, w.kt, 1, dk, vn, dv, lambda, S, dv, triNone, nil)
}
