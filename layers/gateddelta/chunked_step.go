package gateddelta

// chunkStep advances value head h over the C tokens starting at t0: one
// chunk of the chunked form in doc.go, in its symbols. It expects
// w.kc, w.qc = the chunk's K and Q rows (contiguous), w.kk = K Kᵀ and
// w.qk = Q Kᵀ (chunkGroup prepares them once per key head), and updates
// the head's state in place.
func (p *problem) chunkStep(w *scratch, h, t0, c0, c1 int) {
	d, C, ks := p.d, p.C, p.ks
	dk, dv := d.DK, d.DV
	ldv, nv := d.NV*dv, d.NV
	w.gam = growF64(w.gam, C)
	w.eGam = grow(w.eGam, C)
	w.eTail = grow(w.eTail, C)
	w.betaEGam = grow(w.betaEGam, C)
	w.row = grow(w.row, C)
	w.m = grow(w.m, C*C)
	w.p = grow(w.p, C*C)
	w.r = grow(w.r, C*dv)
	w.delta = grow(w.delta, C*dv)
	w.kTail = grow(w.kTail, C*dk)

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
	ks.expAffine(w.eGam, w.gam, 0, 1)            // e^{γ_r}
	ks.expAffine(w.eTail, w.gam, w.gam[C-1], -1) // e^{γ_C − γ_r}
	lambda := w.eGam[C-1]                        // λ = e^{γ_C}, the whole chunk's decay

	// Row r of A = strict_lower((K_β Kᵀ) ⊙ Γ) and of P = lower((Q Kᵀ) ⊙ Γ),
	// with Γ_rs = e^{γ_r − γ_s}. Only s ≤ r is ever exponentiated (masking
	// before the exp); everything right of the diagonal is stored as an
	// exact zero because the triangular products below read whole 4-row
	// tiles.
	for r := 0; r < C; r++ {
		nb := (r + 16) &^ 15 // columns 0..r, rounded up to a vector
		gr := w.row[:nb]
		ks.expAffine(gr, w.gam[:nb], w.gam[r], -1)
		ar := w.m[r*C : (r+1)*C]
		pr := w.p[r*C : (r+1)*C]
		ks.mulScaled(ar[:nb], w.kk[r*C:r*C+nb], gr, p.beta[(t0+r)*nv+h])
		ks.mulScaled(pr[:nb], w.qk[r*C:r*C+nb], gr, 1)
		clear(ar[r:])
		clear(pr[r+1:])
	}

	// M = (I + A)⁻¹ by forward substitution, in place over A.
	unitLowerInverse(ks, w.m, w.row, C)

	// V_β = diag(β) V and K̃ = diag(e^{γ_C−γ}) K are built as scaled
	// copies; the other diagonal factors (e^γ on Q, β e^γ on K) are row
	// scales of products, applied as those products are written back.
	for r := 0; r < C; r++ {
		t := t0 + r
		br := p.beta[t*nv+h]
		w.betaEGam[r] = br * w.eGam[r]
		ks.scaleCopy(w.r[r*dv+c0:r*dv+c1], p.v[t*ldv+h*dv+c0:][:c1-c0], br)
		ks.scaleCopy(w.kTail[r*dk:(r+1)*dk], w.kc[r*dk:(r+1)*dk], w.eTail[r])
	}
	// Everything below is column by column of the state: only the value
	// columns [c0,c1) (nc of them) are computed, read and written.
	nc := c1 - c0
	S := p.state[h*dk*dv+c0 : (h+1)*dk*dv]
	rc, dc := w.r[c0:], w.delta[c0:]
	// R = V_β − diag(β e^γ) K S, in place over V_β; then Δ = M R (the
	// regrouped U − W S of doc.go, which never forms W).
	ks.gemm(C, nc, dk, -1, w.kc, dk, 1, S, dv, 1, rc, dv, triNone, w.betaEGam)
	ks.gemm(C, nc, C, 1, w.m, C, 1, rc, dv, 0, dc, dv, triLowerA, nil)
	// O = diag(e^γ) Q S + P Δ, written straight into this head's output
	// rows.
	o := p.out[t0*ldv+h*dv+c0:]
	ks.gemm(C, nc, dk, 1, w.qc, dk, 1, S, dv, 0, o, ldv, triNone, w.eGam)
	ks.gemm(C, nc, C, 1, w.p, C, 1, dc, dv, 1, o, ldv, triLowerA, nil)
	// S ← λ S + K̃ᵀ Δ (K̃ read transposed: lda = 1, aks = dk).
	ks.gemm(dk, nc, C, 1, w.kTail, 1, dk, dc, dv, lambda, S, dv, triNone, nil)
}

// unitLowerInverse overwrites the strictly lower n×n matrix A (row-major,
// zeros on and above the diagonal) with M = (I + A)⁻¹, which is unit lower
// triangular, by forward substitution: M_r = e_r − Σ_{s<r} A_rs M_s, row
// by row (row r of A is read whole before M_r replaces it). n is a
// multiple of 16 and tmp holds n floats.
func unitLowerInverse(ks *kernels, m, tmp []float32, n int) {
	for r := 0; r < n; r++ {
		mr := m[r*n : (r+1)*n]
		// Columns are done 64 at a time; M_s vanishes right of its
		// diagonal, so columns [j0, …) only need rows s ≥ j0.
		for j0 := 0; j0 < r; j0 += 64 {
			ks.triInvAcc(tmp[j0:min(j0+64, n)], m, mr, n, j0, r)
		}
		copy(mr[:r], tmp[:r])
		mr[r] = 1 // before any later row reads M_r
	}
}
