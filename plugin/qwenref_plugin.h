/*
 * qwenref_plugin.h: the C ABI of a qwenref kernel plug-in.
 *
 * A plug-in is a shared library that exports qwenref_plugin_abi() and any
 * subset of the four kernels below and of the four backward entry points
 * after them (`qwenref check --grad --plugin NAME=PATH.so` runs those). `qwenref CMD --plugin NAME=PATH.so`
 * loads it and registers NAME for each kernel it exports; a backend spec
 * then uses it for that op, e.g. `--backend chunked:delta=NAME:conv=NAME`.
 *
 * Data: host memory, float32, row-major (the last index fastest), no
 * padding between rows. Dimensions are given in elements. qwenref checks
 * every length before the call, so a kernel may trust the dims.
 *
 * Errors: return 0 on success. On failure return non-zero and write a
 * NUL-terminated message of at most errlen bytes (errlen includes the NUL)
 * into err; qwenref reports it with the plug-in's name and the op. Never
 * abort or exit the process.
 *
 * Threading: a kernel may be called from several threads at once, on
 * disjoint buffers (one model serves several sequences), so it must be
 * reentrant: no unguarded global scratch. It may use threads of its own
 * but must have finished writing every output before it returns. Pointers
 * are valid only for the duration of the call; do not keep them.
 *
 * Versioning: qwenref loads a library only when qwenref_plugin_abi()
 * returns the QWENREF_PLUGIN_ABI it was built with. Any change to these
 * signatures or conventions increments it.
 */
#ifndef QWENREF_PLUGIN_H
#define QWENREF_PLUGIN_H

#ifdef __cplusplus
extern "C" {
#endif

#define QWENREF_PLUGIN_ABI 1

/* Returns QWENREF_PLUGIN_ABI. Required. */
int qwenref_plugin_abi(void);

/*
 * The gated delta rule core for one sequence (gateddelta.Kernel).
 *   q, k   [T, NK, DK]  already L2-normalised; q already scaled by DK^-1/2
 *   v      [T, NV, DV]
 *   g      [T, NV]      log-decay (<= 0): alpha_t = exp(g_t)
 *   beta   [T, NV]      write strength
 *   state  [NV, DK, DV] in: the initial state (zeros for a new sequence);
 *                       out: the final state. S[h] is DK x DV, the
 *                       layout of one sequence of fla's [N, HV, K, V].
 *   out    [T, NV, DV]  o_t = S_t^T q_t, read after the update
 * Value head h reads query/key head h / (NV / NK); NV is a multiple of NK.
 * Recurrence per head: S_t = a_t S_{t-1} + k_t (beta_t (v_t - a_t S_{t-1}^T k_t))^T.
 */
int qwenref_gdn_core(float *out, const float *q, const float *k, const float *v,
                     const float *g, const float *beta,
                     int T, int NK, int NV, int DK, int DV,
                     float *state, char *err, int errlen);

/*
 * Causal depthwise conv over time, then SiLU (conv1d.Kernel).
 *   x      [T, C]  inputs
 *   w      [C, K]  taps; w[c*K + K-1] multiplies the current token
 *   state  [K, C]  in: the K inputs before x (zeros for a new sequence);
 *                  out: the last K rows of [state; x]
 *   y      [T, C]  SiLU(sum_j w[c,j] * xs[t-(K-1)+j, c]), xs = [state; x]
 *                  (only the last K-1 state rows are read)
 */
int qwenref_conv(float *y, const float *x, int T, int C, const float *w, int K,
                 float *state, char *err, int errlen);

/*
 * Causal softmax attention with grouped KV heads (attention.Kernel).
 *   q    [T, NH, D]    the T newest positions, S-T .. S-1
 *   k, v [S, NKV, D]   every position 0 .. S-1 (cache then new)
 *   out  [T, NH, D]    query i (position S-T+i) attends to keys 0 .. S-T+i
 * Query head h reads KV head h / (NH / NKV). scores = scale * q.k.
 */
int qwenref_attention(float *out, const float *q, const float *k, const float *v,
                      int T, int S, int NH, int NKV, int D, float scale,
                      char *err, int errlen);

/*
 * y[M, N] = x[M, K] * W^T with W [N, K] (nn.Linear layout) (linalg.MatMuler).
 * bf16 checkpoint weights are widened to float32 by qwenref before the call.
 */
int qwenref_matmul(float *y, const float *x, int M, int K, int N, const float *w,
                   char *err, int errlen);

/*
 * Backward entry points (optional; `qwenref check --grad` runs them on a
 * gradient golden, docs/golden-format.md). Each takes the forward's inputs
 * and the upstream gradients of its outputs, and writes every input's
 * gradient in full (not accumulated), laid out as that input. The loss is
 * <dout, out> + <dfinal, final_state>. An optional input passed as NULL
 * (conv's bias, attention's gate) has a NULL gradient too.
 */

/* The gated delta rule's backward for one sequence: q, k as
 * qwenref_gdn_core takes them; state [NV, DK, DV] is the initial state (not
 * changed); dout [T, NV, DV]; dfinal [NV, DK, DV] the final state's
 * gradient. dstate is the initial state's gradient. */
int qwenref_gdn_core_backward(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dstate,
                              const float *q, const float *k, const float *v, const float *g,
                              const float *beta, const float *state, const float *dout,
                              const float *dfinal, int T, int NK, int NV, int DK, int DV,
                              char *err, int errlen);

/* The causal conv + SiLU's backward for one sequence: y[t, c] =
 * SiLU(bias[c] + sum_j w[c,j] * xs[t+1+j, c]) with xs = [state; x] [K+T, C];
 * dy [T, C]; dfinal [K, C] the final state's gradient (the last K rows of
 * xs, so for T < K it reaches both dx and dstate). bias and dbias [C] may
 * be NULL. dw [C, K] and dbias are this sequence's alone. */
int qwenref_conv_backward(float *dx, float *dw, float *dbias, float *dstate,
                          const float *x, const float *w, const float *bias, const float *state,
                          const float *dy, const float *dfinal, int T, int C, int K,
                          char *err, int errlen);

/* The gated attention core's backward: out = sigmoid(gate) * attention(q,
 * k, v) with qwenref_attention's layouts and masking; gate, dgate and dout
 * [T, NH, D]; gate and dgate may be NULL (no gate). */
int qwenref_attention_backward(float *dq, float *dk, float *dv, float *dgate,
                               const float *q, const float *k, const float *v, const float *gate,
                               const float *dout, int T, int S, int NH, int NKV, int D, float scale,
                               char *err, int errlen);

/* The gated RMSNorm's backward over rows rows of dim values:
 * y = x * rsqrt(mean(x^2) + eps) * w * SiLU(z), x, z, dy [rows, dim], w [dim];
 * dw [dim] sums over the rows. */
int qwenref_gated_rmsnorm_backward(float *dx, float *dz, float *dw,
                                   const float *x, const float *z, const float *w, const float *dy,
                                   int rows, int dim, float eps, char *err, int errlen);

#ifdef __cplusplus
}
#endif

#endif /* QWENREF_PLUGIN_H */
