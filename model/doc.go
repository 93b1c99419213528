// Package model is the Qwen3.5/3.6 text model: config parsing, checkpoint
// loading and validation, the decoder stack and cached decoding
// (generation, conversations and perplexity are package generate's).
//
// The forward pass (docs/spec.md §3.1):
//
//	x₀ = E[ids]
//	x ← x + Mixer_ℓ(RMSNorm₁₊(x))     Mixer is Gated DeltaNet or gated attention
//	x ← x + MLP(RMSNorm₁₊(x))         MLP = W_down(SiLU(W_gate x) ⊙ W_up x)
//	logits = RMSNorm₁₊(x) · W_lmᵀ
//
// Every layer runs on a Backend (naive, chunked, cuda), which swaps how the
// kernels compute, never what. A Model is read-only once loaded and may be
// shared by goroutines; a Session holds one sequence's caches (conv states,
// float32 recurrent states, KV caches) and belongs to one goroutine.
package model
