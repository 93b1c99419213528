/*
 * qwenref_cuda.h: the C ABI of libqwenref_cuda.so, qwenref's CUDA backend.
 *
 * The library is built with nvcc (sm_90) and loaded by the Go package
 * github.com/qwenref/qwenref/cuda through dlopen, so this header is plain C
 * and includes no CUDA header: the Go side compiles without a CUDA toolkit.
 *
 * Conventions:
 *  - Every function returns 0 on success or a nonzero QR_E* code; the message
 *    of the last failure on the calling thread is qr_last_error().
 *  - "host" pointers are ordinary CPU memory; those functions copy in, run and
 *    copy out, and are the verification entry points. Device pointers are
 *    opaque void* handles from qr_alloc/qr_upload_*.
 *  - bf16 values travel as uint16_t bit patterns (the top half of a float32).
 *  - Layouts are those of the Go kernel interfaces (row-major, last axis
 *    contiguous); the comments give them per function.
 */
#ifndef QWENREF_CUDA_H
#define QWENREF_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QR_ABI_VERSION 13

enum {
	QR_OK = 0,
	QR_ECUDA = 1,   /* a CUDA runtime call failed */
	QR_ECUBLAS = 2, /* a cuBLAS call failed */
	QR_EARG = 3,    /* bad dimensions or arguments */
	QR_ESTATE = 4,  /* library not initialised, or used after shutdown */
	QR_ECHECK = 5   /* a built-in self-check failed (bench) */
};

/* Version of this ABI compiled into the library (QR_ABI_VERSION). */
int qr_abi_version(void);
/* Message of the last failure on this thread ("" if none). */
const char *qr_last_error(void);

/* Number of CUDA devices (0 when none); callable before qr_init. */
int qr_device_count(int *n);
/* Select a device, create the cuBLAS handle and the default stream. */
int qr_init(int device);
/* Free everything the library allocated internally; device buffers handed
 * out by qr_alloc/qr_upload_* must be freed by the caller first. */
int qr_shutdown(void);
/* Device name (NUL-terminated, truncated to name_len), multiprocessors,
 * compute capability and global memory in bytes. */
int qr_device_info(char *name, int name_len, int *sm_count, int *cc_major, int *cc_minor, size_t *total_mem);

/* ---- device memory ---- */
int qr_alloc(void **dptr, size_t bytes);
int qr_free(void *dptr);
int qr_memcpy_h2d(void *dst, const void *src, size_t bytes);
int qr_memcpy_d2h(void *dst, const void *src, size_t bytes);
/* Upload bf16 bit patterns into a new device buffer of n bf16 values. */
int qr_upload_bf16(void **dptr, const uint16_t *src, size_t n);
/* Upload float32 values into a new device buffer of n bf16 values
 * (rounded to nearest even on the device). */
int qr_upload_f32_as_bf16(void **dptr, const float *src, size_t n);

/* Upload float32 values into a new device buffer of n float32 values. */
int qr_upload_f32(void **dptr, const float *src, size_t n);
/* Upload bf16 bit patterns into a new device buffer of n float32 values
 * (widened exactly on the device). */
int qr_upload_bf16_as_f32(void **dptr, const uint16_t *src, size_t n);

/* ---- host-API kernels (host pointers, float32 in and out) ---- */

/* y[m,n] = x[m,k] . W^T with W a device bf16 [n,k] buffer; x is rounded to
 * bf16 and the product accumulates in fp32 on tensor cores (cuBLAS). */
int qr_matmul_bf16(float *y, const float *x, int m, int k, int n, const void *w_dev);

/* y[m,n] = x[m,k] . W^T in fp32 with W a device fp32 [n,k] buffer (cuBLAS,
 * pedantic fp32 compute: no TF32). */
int qr_matmul_f32(float *y, const float *x, int m, int k, int n, const void *w_dev);

/* Causal depthwise conv + SiLU: x,y [t,c]; w [c,kw]; state [kw,c] in/out. */
int qr_conv_forward(float *y, const float *x, int t, int c, const float *w, int kw, float *state);

/* Gated delta rule core variants. */
enum {
	QR_GDN_CHUNK_F32 = 0,  /* chunked (C=64), fp32 everywhere, SIMT */
	QR_GDN_CHUNK_BF16 = 1, /* chunked, bf16 operands on tensor cores, fp32 state; dk=dv=128 */
	QR_GDN_RECURRENT = 2   /* per-token recurrence, fp32; a scan launch shape (432, 832, 864) as the variant
	                          runs QR_GDN_CHUNK_BF16 with that shape */
};
/* q,k [t,nk,dk] (normalised, q scaled); v [t,nv,dv]; g,beta [t,nv];
 * state [nv,dk,dv] fp32 in/out; out [t,nv,dv]. */
int qr_gdn_forward(float *out, const float *q, const float *k, const float *v, const float *g, const float *beta,
                   int t, int nk, int nv, int dk, int dv, float *state, int variant);

/* Causal GQA attention: q [t,nh,d], k,v [s,nkv,d], out [t,nh,d]; query i
 * sits at position s-t+i. fp32, online softmax (flash style). */
int qr_attention_forward(float *out, const float *q, const float *k, const float *v, int t, int s, int nh, int nkv,
                         int d, float scale);

/* The decode GEMV (gemv.cu) on host data: x [k], w [n,k] rounded to bf16;
 * ymode 0: y [n] = bf16(W x); 1: y [n] += W x (fp32); 2: y [n] = W x (fp32);
 * 3: w = gate rows over up rows, y [n/2] = bf16(SiLU(g)·u) of g, u rounded
 * to bf16. bf16 results come back widened to fp32. */
int qr_gemv(float *y, const float *x, const float *w, int n, int k, int ymode);

/* The model's decode attention kernels (split keys, combine, sigmoid gate)
 * on host data: q [nh,256], k,v [cap,nkv,256] (the first s rows are keys),
 * gate [nh,256]; out [nh,256]. Inputs rounded to bf16, out the bf16 result. */
int qr_attention_decode(float *out, const float *q, const float *k, const float *v, const float *gate, int s, int cap,
                        int nh, int nkv);

/* The prefill flash attention (bf16 tensor cores, causal, GQA, sigmoid gate)
 * on host data: q and gate [t,nh,256] at positions pos0.., k,v
 * [pos0+t,nkv,256]; out [t,nh,256]. Inputs rounded to bf16, out the bf16
 * result. variant: a launch shape (100*warps + key tile), 0 the default. */
int qr_flash_attention(float *out, const float *q, const float *k, const float *v, const float *gate, int t, int pos0,
                       int nh, int nkv, int variant);

/* The device model's MoE router on host data: logits [t, e] fp32 -> for
 * each row its k experts by descending softmax probability, exact ties to
 * the lower expert index (as torch.topk on CUDA keeps them), ids [t, k] and
 * weights [t, k] (renormalised to sum 1 when norm). e <= 8192, k <= 64. */
int qr_moe_route(int32_t *ids, float *w, const float *logits, int t, int e, int k, int norm);

/* RMSNorm over rows of n: y = x * rsqrt(mean(x^2)+eps) * (one_plus ? 1+w : w). */
int qr_rmsnorm(float *y, const float *x, int rows, int n, const float *w, float eps, int one_plus);
/* Gated RMSNorm: y = w * (x * rsqrt(mean(x^2)+eps)) * SiLU(z) over the heads
 * rows of n of each of t tokens (x, z, y [t, heads*n]); bf16: inputs rounded
 * to bf16 and the layer's bf16 kernel run, its bf16 output widened back. */
int qr_gated_rmsnorm(float *y, const float *x, const float *z, int t, int heads, int n, const float *w, float eps,
                     int bf16);
/* Partial rotate-half RoPE in place: x [t,heads,d]; the first rot dims of
 * each head rotate (pairs i, i+rot/2) at angle pos[t] * theta^(-2i/rot). */
int qr_rope(float *x, const int32_t *pos, int t, int heads, int d, int rot, float theta);
/* SwiGLU: y = SiLU(gate) * up, n values. */
int qr_swiglu(float *y, const float *gate, const float *up, size_t n);

/* ---- a whole Gated DeltaNet layer (bf16 weights, bf16 activations) ---- */
typedef struct {
	int hidden;   /* H */
	int nk, nv;   /* key and value heads */
	int dk, dv;   /* head dims (the tensor-core core needs 128/128) */
	int kconv;    /* conv taps */
	float eps;    /* gated-norm epsilon */
} qr_gdn_dims;

typedef struct {
	const uint16_t *w_in;  /* [2nk dk + 2nv dv + 2nv, H] bf16: rows qkv | z | b | a */
	const uint16_t *w_out; /* [H, nv dv] bf16 */
	const float *conv_w;   /* [2nk dk + nv dv, kconv] */
	const float *a_log;    /* [nv] */
	const float *dt_bias;  /* [nv] */
	const float *norm_w;   /* [dv], plain scale */
} qr_gdn_weights;

/* out [t,H] = GatedDeltaNet(x [t,H]). conv_state [kconv, conv dim] and
 * rec_state [nv,dk,dv] are in/out (zeros start a sequence). t == 1 takes
 * the decode path (GEMV + recurrent update); t > 1 the prefill path
 * (cuBLAS + chunked tensor-core core). */
int qr_gdn_layer(float *out, const float *x, int t, const qr_gdn_dims *d, const qr_gdn_weights *w,
                 float *conv_state, float *rec_state);

/* ---- device-resident timing (27B dimensions, random data from a seed) ---- */
enum {
	QR_BENCH_COPY = 0,      /* device-to-device copy; t = MiB; out[3] = GB/s (read+write) */
	QR_BENCH_GEMM = 1,      /* cuBLAS bf16 t x t x t; out[3] = TFLOP/s */
	QR_BENCH_CONV = 2,      /* conv+SiLU, 10240 channels, bf16 in/out */
	QR_BENCH_GDN_CORE = 3,  /* chunked core, 48/16 heads of 128; variant = value-block width 32|64, 0 = fp32 SIMT */
	QR_BENCH_GDN_LAYER = 4, /* whole GDN layer prefill; out[3..] = stage medians */
	QR_BENCH_DECODE = 5,    /* one GDN layer decode step; variant 1 = CUDA graph replay */
	QR_BENCH_ATTN = 6,      /* fp32 attention core, 24/4 heads of 256 (verification kernel) */
	QR_BENCH_FLASH = 7      /* bf16 flash attention (prefill), 24/4 heads of 256; variant = shape; out[3] = TFLOP/s */
};
/* Runs warm-ups, then reps timed repetitions (CUDA events) and writes
 * out[0] = median ms, out[1] = min ms, out[2] = max ms, out[3..nout) =
 * per-benchmark extras (see the enum). Returns QR_EARG for unknown what. */
int qr_bench(int what, int t, int variant, int reps, double *out, int nout);

/* Free and total device memory in bytes (cudaMemGetInfo). */
int qr_mem_info(size_t *free_bytes, size_t *total_bytes);

/* ---- the whole model resident on the device (model.cu) ----
 * Two precisions of the same executor. bf16 (f32 = 0, "cuda"): bf16
 * weights, fp32 residual stream, recurrent states and logits; bf16 conv
 * states and KV caches; GDN head dims 128/128, attention head dim 256 (every
 * Qwen3.5/3.6 size). fp32 (f32 = 1, "cuda-fp32", plan_f32.cu): every weight,
 * activation, state and cache in fp32, cuBLAS with TF32 off, the per-token
 * delta rule, any head dims (attention up to 256); decode runs the one-row
 * prefill forms, without a graph. Handles are opaque; one thread at a time. */
typedef struct {
	int vocab, hidden, inter, nlayers;
	int nk, nv, dk, dv, kconv;    /* Gated DeltaNet */
	int nh, nkv, hd, rot;         /* gated attention */
	float theta, eps;             /* rope_theta, rms_norm_eps */
	int max_tokens;               /* KV-cache capacity (positions) */
	int experts, topk;            /* MoE: num_experts, num_experts_per_tok (0: dense model) */
	int moe_inter, shared_inter;  /* moe_intermediate_size, shared_expert_intermediate_size */
	int norm_topk;                /* norm_topk_prob: renormalise the chosen weights */
	int f32;                      /* 1: the fp32 model (see above), 0: bf16 */
} qr_model_dims;

/* kinds[nlayers]: bit 0 is the mixer (0 = Gated DeltaNet, 1 = full
 * attention), bit 1 the MLP (0 = dense SwiGLU of width inter, 2 = the
 * sparse MoE block: router, top-k experts, gated shared expert; up to 8192
 * experts, top-64). Weights are allocated, not set. */
int qr_model_create(void **model, const qr_model_dims *d, const int32_t *kinds);
int qr_model_destroy(void *model);
/* Every weight from seed, generated on the device with the distributions of
 * model.RandomValues (linear N(0, 1/fan_in), embedding N(0,1), ...). */
int qr_model_random(void *model, uint64_t seed);

/* The block plan (model.Plan): the decoder as an ordered list of steps that
 * the library executes, each an op it has in a prefill form (T rows: GEMM,
 * chunked core, flash attention) and a decode form (one row: GEMV, recurrent
 * update, split-key attention; graph-capturable). The library holds no
 * decoder of its own: which ops run, in which order, and the stage names a
 * trace records come from the plan. X is the fp32 residual stream, XN the
 * bf16 normed rows. */
enum {
	QR_OP_EMBED = 0,    /* X = E[ids] (layer -1) */
	QR_OP_NORM,         /* XN = RMSNorm1+(X; w), w = arg: QR_W_INPUT_NORM, QR_W_POST_NORM, QR_W_FINAL_NORM (layer -1,
	                       the rows whose logits are wanted) */
	QR_OP_RECORD,       /* no compute: a trace records X */
	QR_OP_GDN_IN_PROJ,  /* [qkv | z | b | a] = XN W_inT; records the four products */
	QR_OP_GDN_CONV,     /* causal conv + SiLU over qkv, continuing the conv state */
	QR_OP_GDN_PREP,     /* gates g, beta and L2-normed q, k; decode: fused into QR_OP_GDN_CORE */
	QR_OP_GDN_CORE,     /* the gated delta rule (chunked / one recurrent step) */
	QR_OP_GDN_NORM,     /* gated RMSNorm of the core's output by SiLU(z) */
	QR_OP_GDN_OUT,      /* X += y W_outT */
	QR_OP_ATT_QKV,      /* [q|gate, k, v] = XN W_qkvT */
	QR_OP_ATT_PREP,     /* q, k RMSNorm and rotary; k, v into the cache */
	QR_OP_ATT_CORE,     /* causal attention over the cache, times sigma(gate) */
	QR_OP_ATT_OUT,      /* X += o W_oT */
	QR_OP_MLP_GATE_UP,  /* act = SiLU(XN W_gT) * (XN W_uT) */
	QR_OP_MLP_DOWN,     /* X += act W_downT */
	QR_OP_MOE_ROUTE,    /* router logits, softmax, top-k, renormalised weights */
	QR_OP_MOE_EXPERTS,  /* the chosen experts' SwiGLU MLPs (grouped GEMMs; decode: gathered GEMVs, with the shared
	                       expert, in launch shape arg: 0 .. QR_MOE_DECODE_SHAPES-1) */
	QR_OP_MOE_SHARED,   /* the shared expert (decode: done by QR_OP_MOE_EXPERTS) */
	QR_OP_MOE_COMBINE,  /* X += sum of weighted experts + sigma(gate) * shared */
	QR_OP_LM_HEAD,      /* logits = XN W_headT (layer -1); a greedy decode step also takes the argmax */
	QR_OP_COUNT
};
#define QR_STEP_RECORDS 6
/* Launch shapes of the bf16 model's decode expert GEMVs (QR_OP_MOE_EXPERTS's
 * arg): rows per warp and loads in flight; every shape gives the same bits. */
#define QR_MOE_DECODE_SHAPES 4
/* Launch shapes of the bf16 model's decode GEMVs (the arg of the GDN and
 * attention projections, the dense MLP, the router and the head): rows per
 * warp and loads in flight; every shape gives the same bits. */
#define QR_GEMV_SHAPES 4
/* One step. rec[i] is the byte offset in the plan's names of the full stage
 * name ("layers.3.qkv_proj") the op's i-th output is recorded under while a
 * trace is on, or -1 where it is not recorded. */
typedef struct {
	int32_t op, layer, arg;
	int32_t rec[QR_STEP_RECORDS];
} qr_step;
/* Set the model's plan: n steps, names [names_len] of NUL-terminated stage
 * names. Checked against the layer kinds; a forward before a plan is set
 * fails. The first step must be QR_OP_EMBED and the last QR_OP_LM_HEAD. */
int qr_model_plan(void *model, const qr_step *steps, int n, const char *names, size_t names_len);

/* Which tensor qr_model_set writes. Matrices are [out, in] as stored. */
enum {
	QR_W_EMBED = 0, QR_W_LM_HEAD, QR_W_FINAL_NORM,
	QR_W_INPUT_NORM, QR_W_POST_NORM, QR_W_MLP_GATE, QR_W_MLP_UP, QR_W_MLP_DOWN,
	QR_W_GDN_QKV, QR_W_GDN_Z, QR_W_GDN_B, QR_W_GDN_A, QR_W_GDN_OUT,
	QR_W_GDN_CONV, QR_W_GDN_ALOG, QR_W_GDN_DTBIAS, QR_W_GDN_NORM,
	QR_W_ATT_Q, QR_W_ATT_K, QR_W_ATT_V, QR_W_ATT_O, QR_W_ATT_QNORM, QR_W_ATT_KNORM,
	/* the sparse MLP: router [E, H], the shared expert's gate [1, H], its
	 * gate/up [Is, H] and down [H, Is]; then per expert (part = expert
	 * index) gate/up [I, H] and down [H, I] */
	QR_W_MOE_ROUTER, QR_W_MOE_SHARED_PROB, QR_W_MOE_SHARED_GATE, QR_W_MOE_SHARED_UP, QR_W_MOE_SHARED_DOWN,
	QR_W_MOE_GATE, QR_W_MOE_UP, QR_W_MOE_DOWN
};
/* Upload n values of one tensor (layer ignored for the first three; part is
 * the expert for QR_W_MOE_GATE/UP/DOWN, else 0): src_bf16 = 1: bf16 bit
 * patterns, else float32 (a bf16 model rounds matrices to bf16 on the
 * device, an fp32 model widens bf16 ones exactly; vectors stay float32). */
int qr_model_set(void *model, int layer, int which, int part, const void *src, size_t n, int src_bf16);
/* Download n values of one tensor as stored: matrices as bf16 bit
 * patterns (bf16 model) or float32 (fp32 model), vectors as float32. */
int qr_model_get(void *model, int layer, int which, int part, void *dst, size_t n);
/* Empty every cache and state (position 0). */
int qr_model_reset(void *model);
/* Feed t tokens at the current position; logits (host, fp32) get [t, vocab]
 * values, or [1, vocab] with last_only; logits NULL copies none back. t == 1
 * runs the decode path (GEMV, recurrent update, split-key attention) as one
 * CUDA-graph replay, t > 1 the prefill path (cuBLAS, chunked core, flash
 * attention); the fp32 model runs its one form for any t. */
int qr_model_forward(void *model, const int32_t *ids, int t, int last_only, float *logits);
/* Batch rows: give every state and cache `rows` rows (1 to 1024), all empty
 * (position 0); the model keeps its weights. Nothing changes when the memory
 * is short. qr_model_forward then runs row 0 alone. */
int qr_model_rows(void *model, int rows);
/* ids [rows, t] (rows as set by qr_model_rows): every row gets t tokens at the
 * common position. t = 1 on the bf16 model is one decode step of all rows at
 * once (GEMMs over the rows, the decode kernels over rows × heads, one CUDA
 * graph replay); otherwise each row is prefilled in turn. logits (may be
 * NULL) [rows, last_only ? 1 : t, vocab]. qr_model_last_ms sums the rows. */
int qr_model_forward_rows(void *model, const int32_t *ids, int rows, int t, int last_only, float *logits);
/* Device time (ms, CUDA events) of the last qr_model_forward: from its inputs
 * being on the device to its logits being ready there, so no host copy is
 * inside; -1 before the first call. */
int qr_model_last_ms(void *model, float *ms);
/* Decoder block `layer` alone on x [t, hidden] (host fp32; teacher forcing),
 * continuing that block's own state and position (each block counts the
 * tokens it consumed); out [t, hidden] gets its output. Stages are recorded
 * while a trace is on. The model's position is unchanged. */
int qr_model_layer(void *model, int layer, const float *x, int t, float *out);
/* Greedy decoding on the device from the current position: n steps of one
 * CUDA graph each (embed → 64 layers → lm_head → argmax → next token; the
 * fp32 model: plain launches), the first fed first_id; writes the n chosen
 * ids. */
int qr_model_greedy(void *model, int32_t first_id, int n, int32_t *out_ids);
/* Stage recording for tracing: on = 1 starts recording (and clears what was
 * recorded), on = 0 stops and frees it. While on, every forward runs the
 * prefill path and copies each stage the CPU recorder names ("embeddings",
 * "layers.N.<stage>", "final_norm") to the host as fp32. */
int qr_model_trace(void *model, int on);
/* While a trace is on: record only the stages named in names ('\n'-separated,
 * each under 128 bytes); the ops whose records are not wanted run their fast,
 * fused forms. An empty string records every stage again. */
int qr_model_trace_only(void *model, const char *names);
/* Number of stages recorded so far. */
int qr_model_trace_count(void *model, int *n);
/* Stage i: its name (NUL-terminated, truncated to name_len), up to 3 dims
 * (unused ones 0) and, when dst is not NULL, its n values. */
int qr_model_trace_entry(void *model, int i, char *name, int name_len, int *dims, float *dst, size_t n);
/* Current position, and device bytes held: weights, states + caches,
 * activations + scratch. */
int qr_model_info(void *model, int *pos, size_t *weight_bytes, size_t *state_bytes, size_t *act_bytes);

enum {
	QR_MBENCH_PREFILL = 0, /* prefill of t random tokens from position 0, all logits; out[3] = tok/s,
	                          out[4..] = stage ms of one profiled pass (see qr_model_stage_name) */
	QR_MBENCH_DECODE = 1,  /* greedy decode steps (graph replays) after a prefill of t tokens; variant =
	                          timed steps; out[3] = plain-launch ms/token, out[4] = weight GB/s,
	                          out[5 + i] = stage i's ms in one profiled plain-launch step */
	QR_MBENCH_MIXER = 2    /* layer `variant`'s token mixer alone on t rows of N(0, 1) normed input from an
	                          empty cache (position 0); out[3] = tok/s */
};
/* Device-resident whole-model timing: warm-ups, then reps (CUDA events);
 * decode and mixer time the bf16 model only. */
int qr_model_bench(void *model, int what, int t, int variant, int reps, double *out, int nout);
/* Name of prefill stage i (out[4 + i] of QR_MBENCH_PREFILL), NULL past the last. */
const char *qr_model_stage_name(int i);

#ifdef __cplusplus
}
#endif
#endif
