// Package gateddelta holds the core of a Gated DeltaNet layer: the gated
// delta rule, a linear-attention recurrence over a matrix-valued state.
//
// # The recurrence
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
// Naive runs exactly that. Recurrent runs it with the state kept as
// S = c·S̃, c the product of the decays since the last rebase, so the
// decay costs one scalar per token instead of a sweep (recurrent.go):
//
//	c′ = c·e^{g_t},  δ′_t = β_t (v_t − c′ S̃ᵀ k̂_t) / c′,  S̃ ← ρ S̃ + k̂_t δ′_tᵀ,  o_t = c′ S̃ᵀ q̂_t
//
// where ρ = 1, or ρ = c′ and c′ ← 1 when c′ falls below 2⁻⁴⁰ and on the
// call's last token (a rebase, so the stored state is the true S).
//
// # The chunked form
//
// Chunked computes the same thing for C tokens at once with matrix
// products (chunked.go, chunked_step.go). Within a chunk of C tokens, with
// the chunk's rows stacked as matrices and S the state before the chunk:
//
//	γ_r  = Σ_{i≤r} g_i,  Γ_rs = e^{γ_r−γ_s} (s ≤ r),  λ = e^{γ_C}
//	A    = strict_lower((K_β Kᵀ) ⊙ Γ)          how tokens overwrite each other
//	P    = lower((Q Kᵀ) ⊙ Γ)                   intra-chunk attention, diagonal included
//	M    = (I + A)⁻¹                           forward substitution
//	Δ    = U − W S,  U = M V_β,  W = M diag(e^γ) K_β   (the WY/UT form)
//	O    = diag(e^γ) Q S + P Δ
//	S    ← λ S + K̃ᵀ Δ
//
// Δ (row r is δ_rᵀ) solves the triangular system (I + A) Δ = R with
//
//	R = V_β − diag(β e^γ) K S
//
// and the code computes it that way, Δ = M R: the same product as U − W S
// regrouped, which never forms W (a C×C by C×d_k product).
//
// # Symbols
//
// One name per matrix, in this package, in docs/learn/03-chunked-form.md
// and in the CUDA sources; per value head, for one chunk:
//
//	symbol  code      meaning                                  shape
//	C       C         chunk length (16, 32, 64 or 128)         scalar
//	T       d.T       tokens in the call                       scalar
//	Q, K    qc, kc    the chunk's q̂ and k̂ rows                 C×d_k
//	V       v         the chunk's value rows                   C×d_v
//	S       S         state before the chunk (after, on exit)  d_k×d_v
//	γ       gam       inclusive cumulative log-decay, float64  C
//	λ       lambda    e^{γ_C}, the whole chunk's decay          scalar
//	Γ       (row)     e^{γ_r−γ_s} for s ≤ r                    C×C
//	KKᵀ     kk        K Kᵀ, shared by a key head's value heads C×C
//	QKᵀ     qk        Q Kᵀ, likewise                           C×C
//	A       m (in)    strict_lower((K_β Kᵀ) ⊙ Γ)               C×C
//	P       p         lower((Q Kᵀ) ⊙ Γ)                        C×C
//	M       m         (I + A)⁻¹, built over A in place         C×C
//	R       r         V_β − diag(β e^γ) K S, over V_β in place  C×d_v
//	Δ       delta     M R: the chunk's deltas, one per row     C×d_v
//	K̃       kTail     diag(e^{γ_C−γ}) K                        C×d_k
//	O       o         output rows                              C×d_v
//	KS, QS  –         K S and Q S, products of the state       C×d_v
//	S̃, c, ρ –         the recurrent kernel's scaled state      d_k×d_v
//
// β_r and e^{γ_r} enter as row scales (K_β = diag(β) K, V_β = diag(β) V),
// applied where a product is written back rather than as scaled copies.
//
// # Kernels
//
// Chunked runs the chunked form for every whole chunk and the fused
// recurrence for inputs shorter than a chunk and for ragged tails;
// Recurrent runs the fused recurrence for every token. Their inner loops
// (tiles_*.go, recurrent_*.go) are chosen once at start from the CPU's
// kernel level (internal/cpu): AVX-512 or AVX2+FMA assembly on amd64,
// NEON on arm64, portable Go elsewhere; KernelInfo names them. All
// kernels satisfy Kernel and agree to about 1e-6 relative error in
// float32.
package gateddelta
