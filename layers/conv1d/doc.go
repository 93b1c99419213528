// Package conv1d is the causal depthwise convolution with SiLU that sits
// between the qkv projection and the gated delta rule in every GatedDeltaNet
// layer (spec §3.3 step 2, §3.4).
//
// For each channel c and token t, with K taps (K = 4 for Qwen3.5):
//
//	y[t,c] = SiLU( Σ_{j=0}^{K−1} w[c,j] · m[t−(K−1)+j, c] ),   SiLU(u) = u·σ(u)
//
// so tap w[c,K−1] multiplies the current token. Inputs at negative times come
// from the state: state row K+τ holds m[τ] for τ = −K..−1 (zeros at the start
// of a sequence). After the call the state holds the last K rows of
// [state; x], ready for the next call.
//
// Decode is the same formula with T = 1: y = SiLU(Σ_{j<K−1} w[c,j]·state[j+1,c]
// + w[c,K−1]·m_t), then the state shifts up one row and m_t becomes row K−1.
// Prefill, continuation and decode are therefore one kernel, and splitting a
// sequence at any points while carrying the state gives the same outputs.
//
// Why K inputs and not K−1: the conv only ever reads the newest K−1 rows
// (row 0 is dead for the output), but transformers' conv_states and
// causal-conv1d's causal_conv1d_update keep K columns ([state ‖ m_t] has K+1
// columns; the update keeps the last K). Holding K rows makes our state
// exactly conv_states transposed, so caches move between the two unchanged.
//
// Naive is the per-(t, c) reference. Chunked is one streaming pass that is
// SIMD over channels (simd/archsimd under GOEXPERIMENT=simd on AVX-512
// machines, portable Go otherwise) and parallel over time ranges: outputs
// depend on inputs only, so rows split freely, and whole-row sweeps stream
// better than channel blocks (measured).
package conv1d
