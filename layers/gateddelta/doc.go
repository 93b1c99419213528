// Package gateddelta holds the core of a Gated DeltaNet layer: the gated
// delta rule, a linear-attention recurrence over a matrix-valued state.
//
// For each value head, with state S ∈ ℝ^{d_k×d_v} (zero or carried over
// from the previous call) and per token t a query q̂_t and key k̂_t
// (L2-normalised, q̂ scaled by d_k^-1/2), a value v_t, a log-decay g_t ≤ 0
// and a write strength β_t ∈ (0,1):
//
//	S′  = e^{g_t} S                  decay the memory
//	δ_t = β_t (v_t − S′ᵀ k̂_t)        how wrong the memory is about k̂_t
//	S   = S′ + k̂_t δ_tᵀ              correct it (a rank-one write)
//	o_t = Sᵀ q̂_t                     read, including token t itself
//
// That is the recurrent form (Naive). It is sequential in t; the chunked
// form computes the same thing for C tokens at once with matrix products.
// Within a chunk, with γ the cumulative sum of g, Γ_rs = e^{γ_r−γ_s} for
// s ≤ r, K_β = diag(β)K and V_β = diag(β)V:
//
//	A     = (K_β Kᵀ) ⊙ Γ, strictly lower part   (how tokens overwrite each other)
//	T     = (I + A)⁻¹                           (forward substitution)
//	U     = T V_β,  W = T diag(e^γ) K_β         (the WY/UT transform)
//	V_new = U − W S                             (per-token corrections)
//	O     = diag(e^γ) Q S + ((Q Kᵀ) ⊙ Γ) V_new  (state read + intra-chunk)
//	S     ← e^{γ_C} S + (diag(e^{γ_C−γ}) K)ᵀ V_new
//
// Chunked runs that (spec §4.1), plus a fused single-sweep recurrence for
// inputs shorter than a chunk and for ragged tails; Recurrent runs the
// fused recurrence for every token. All three kernels satisfy Kernel and
// agree to about 1e-6 relative error in float32.
package gateddelta
