// Package attention is the gated full-attention token mixer of Qwen3.5/3.6
// (Qwen3_5Attention, spec §5), used by every fourth layer of the hybrid
// stack. For one sequence x [T, H] whose first new token sits at position P:
//
//	[q_h | z_h] = (x·W_qᵀ) per head h   q_proj is interleaved per head: rows
//	                                     h·2D … h·2D+D−1 query, next D gate
//	q_h = RMSNorm₁₊(q_h; w_q),  k = RMSNorm₁₊(x·W_kᵀ; w_k),  v = x·W_vᵀ
//	                                     over D, scale (1+w), eps 1e-6, fp32
//	q, k ← RoPE on dims 0..R−1 only      R = D/4 = 64; rotate_half pairs i
//	                                     with i+R/2; θ = 1e7; positions P+t
//	K, V ← [cache; k, v]                 S = P+T rows, n_kv heads
//	o_h = softmax(q_h·K_gᵀ·D^−½ + causal mask)·V_g,  g = h/(n_h/n_kv) (GQA)
//	out = (o ⊙ σ(z))·W_oᵀ                the sigmoid gate comes before
//	                                     o_proj; there is no norm after it
//
// layer.go wires the whole layer. The Kernel in this package is only the
// softmax core, the o_h line: causal softmax(q·kᵀ·scale)·v with grouped KV
// heads, query t at absolute position S−T+t seeing keys 0..S−T+t, the
// softmax in fp32 with the row maximum subtracted.
//
// Naive computes whole score rows. Chunked is tiled flash attention with an
// online softmax, O(T) memory, SIMD over query rows (simd/archsimd under
// GOEXPERIMENT=simd on AVX-512 machines, portable Go otherwise) and
// parallel over KV heads and query blocks.
package attention
