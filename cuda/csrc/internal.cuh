// internal.cuh: device-level launchers shared between the .cu files. All
// pointers here are device pointers; every launcher enqueues on stream st
// and returns a QR_* status (launch errors only; completion is checked by
// the caller's synchronisation).
#pragma once

#include "common.cuh"

int qr_kernels_init();   // one-time kernel attributes (shared-memory limits)
void qr_bench_release(); // frees bench-owned buffers (qr_shutdown)

// cuBLAS GEMM, row-major y[m,n] = x[m,k] . W^T; x, W bf16; y f32 or bf16.
int qr_gemm_bf16(void *y, int y_is_f32, int ldy, const bf16_t *x, int ldx, const bf16_t *w, int ldw, int m, int n,
                 int k, cudaStream_t st);
// The one GEMV (gemv.cu): y[n] = W[n,k] . x[k] for one token, x and W bf16,
// fp32 sums. ymode: GEMV_Y_BF16 (y bf16 =), GEMV_Y_ADD_F32 (y fp32 +=, a
// fused residual add), GEMV_Y_F32 (y fp32 =) or GEMV_Y_SWIGLU (W = gate_proj
// over up_proj, n = 2I: y bf16 [I] = SiLU(gate)·up). k % 8 == 0, k <= 24576,
// 16-byte aligned x and W. Launched with programmatic dependent launch, in
// launch shape shape < QR_GEMV_SHAPES (every shape the same bits).
enum { GEMV_Y_BF16 = 0, GEMV_Y_ADD_F32 = 1, GEMV_Y_F32 = 2, GEMV_Y_SWIGLU = 3 };
int launch_gemv(int ymode, void *y, const bf16_t *x, const bf16_t *w, int n, int k, cudaStream_t st, int shape = 0);

// One decode token of the conv, in place: state [K, C] bf16 holds the last K
// inputs (oldest first); u = SiLU(conv) bf16 [C]; graph-replayable.
int launch_conv_decode(bf16_t *u, bf16_t *state, const bf16_t *x, const float *w, int C, int K, cudaStream_t st);
// The same for `rows` batch rows: row r reads x + r·ldx, writes u + r·ldu and
// updates its own state [K, C] at state + r·K·C.
int launch_conv_decode_rows(bf16_t *u, int ldu, bf16_t *state, const bf16_t *x, int ldx, const float *w, int C,
                            int K, int rows, cudaStream_t st);
// Causal depthwise conv + SiLU. x [t, ldx] (first c columns used), y [t, ldy];
// w [c, kw] fp32; state_in/state_out [kw, c] of x's type (may be null: zeros /
// not written). xbf/ybf: 1 = bf16, 0 = f32.
int launch_conv(void *y, int ybf, int ldy, const void *x, int xbf, int ldx, int t, int c, const float *w, int kw,
                const void *state_in, void *state_out, cudaStream_t st);
// Conv launch shape override (rows in flight per thread, steps per thread);
// 0 = default. Benchmarks set these to compare shapes.
extern int g_conv_u, g_conv_tt;
// Host fp32 attention inputs onto the device for the kernels' checks
// (attn.cu): q, k, v as bf16, the gate rows in the q_proj layout.
int upload_attn_inputs(DevBuf &bq, DevBuf &bk, DevBuf &bv, DevBuf &bg, const float *q, size_t nq, const float *k,
                       const float *v, size_t nk, const float *gate, size_t rows);
// Flash attention launch shape for bench and its test (flash_attn.cu; 0: the default).
extern int g_fa_variant;

// Gated delta rule core arguments. Strides are in elements between tokens;
// head h of a token starts at h*dk (q, k) or h*dv (v, out).
struct GdnArgs {
	int T, NK, NV, DK, DV;
	const void *q;
	int ldq;
	const void *k;
	int ldk;
	const void *v;
	int ldv;
	const float *g;    // [T, NV]
	const float *beta; // [T, NV]
	void *out;
	int ldo;
	float *state; // [NV, DK, DV], initial on entry, final on return
};
// Scratch for the chunked paths: per (value head, chunk) the 64x64 P and
// Mb = M diag(beta) = (I + A)^-1 diag(beta) matrices and the 64 cumulative
// log-decays γ (layers/gateddelta/doc.go's names; gdn_chunk_prep.cuh).
size_t gdn_scratch_bytes(int T, int NV, int f32);
// fp32 everywhere, SIMT; any dk <= 256, any dv.
int gdn_chunk_f32(const GdnArgs &a, void *scratch, cudaStream_t st);
// bf16 q/k/v on tensor cores, fp32 state; dk = dv = 128; bv the scan's
// launch shape, warps · 100 + value columns per block (432, 832, 864; 32
// and 64 name 432 and 864); out f32 or bf16.
#define GDN_SCAN_MMA_SYNC 864 // the mma.sync scan's best shape: the core 2.6% faster than 432 at T = 8192 on the H200 (docs/perf-cuda-kernels.md), the same bits
// The default scan shape: 1064 where the device runs the warpgroup-MMA scan
// (sm_90a code on an sm_90 device, known after qr_init), else 864.
int gdn_scan_default();
int gdn_chunk_bf16(const GdnArgs &a, int bv, int out_f32, void *scratch, cudaStream_t st);
// Its two kernels separately (benchmarks): the parallel per-chunk prep and
// the sequential scan.
int gdn_prep_bf16(const GdnArgs &a, void *scratch, cudaStream_t st);
int gdn_scan_bf16(const GdnArgs &a, int bv, int out_f32, const void *scratch, cudaStream_t st);
// One fused decode step for dk = dv = 128: u is one token's conv output
// (q | k | v), ba its b then a projections; out [nv*128] bf16.
int launch_gdn_decode128(bf16_t *out, const bf16_t *u, const bf16_t *ba, float *state, int nk, int nv,
                         const float *a_log, const float *dt_bias, cudaStream_t st);
// The same for `rows` batch rows: row r reads u + r·ldu and ba + r·ldba,
// writes out + r·nv·128 and updates its own state [nv, 128, 128] after row r − 1's.
int launch_gdn_decode128_rows(bf16_t *out, const bf16_t *u, int ldu, const bf16_t *ba, int ldba, float *state, int nk,
                              int nv, const float *a_log, const float *dt_bias, int rows, cudaStream_t st);
// Per-token recurrence in fp32 (decode); inputs f32 or bf16, out likewise.
int gdn_recurrent(const GdnArgs &a, int in_bf16, int out_bf16, cudaStream_t st);

// RMSNorm rows of n (fp32 math). one_plus selects the (1+w) form.
int launch_rmsnorm(void *y, int ybf, const void *x, int xbf, int rows, int n, const float *w, float eps, int one_plus,
                   cudaStream_t st);
// Gated RMSNorm per (token, head): y = w * norm(x) * SiLU(z), n = head dim.
int launch_gated_rmsnorm(void *y, int ybf, int ldy, const void *x, int xbf, int ldx, const void *z, int zbf, int ldz,
                         int t, int heads, int n, const float *w, float eps, cudaStream_t st);
// GDN layer prep: from the conv output u [t, ldu] (q | k | v channels) write
// L2-normalised q (scaled by dk^-1/2) and k as bf16 [t, nk, dk]; from the
// projections ba [t, ldp] (b at column 0, a at column nv) write beta and the
// log-decay g as fp32 [t, nv].
int launch_gdn_prep(bf16_t *qn, bf16_t *kn, float *g, float *beta, const bf16_t *u, int ldu, const bf16_t *ba, int ldp,
                    int t, int nk, int nv, int dk, const float *a_log, const float *dt_bias, cudaStream_t st);
// The same in fp32 throughout (the fp32 model).
int launch_gdn_prep_f32(float *qn, float *kn, float *g, float *beta, const float *u, int ldu, const float *ba, int ldp,
                        int t, int nk, int nv, int dk, const float *a_log, const float *dt_bias, cudaStream_t st);
// Partial rotate-half RoPE in place on x [t, heads, d].
int launch_rope(void *x, int bf, const int32_t *pos, int t, int heads, int d, int rot, float theta, cudaStream_t st);
// y = SiLU(gate) * up.
int launch_swiglu(void *y, const void *gate, const void *up, size_t n, int bf, cudaStream_t st);
// fp32 causal GQA attention (online softmax).
int launch_attention(float *out, const float *q, const float *k, const float *v, int t, int s, int nh, int nkv, int d,
                     float scale, cudaStream_t st);

// ---- the gated attention layer on the device (attn.cu) ----
// q/k RMSNorm(1+w) + partial RoPE (rot 64 or 128) for t tokens at positions
// *pos_dev + i: qn [t, nh, hd]; keys and values written into the caches
// kc/vc [cap, nkv, hd] at those rows. qkv rows (stride ld): nh × [query |
// gate], then nkv keys, then nkv values. With cstride > 0 the t tokens are
// batch rows instead, all at position *pos_dev: row i's cache is
// kc/vc + i·cstride.
int launch_attn_prep(bf16_t *qn, bf16_t *kc, bf16_t *vc, const bf16_t *qkv, int ld, int t, int nh, int nkv, int hd,
                     int rot, float theta, const float *qw, const float *kw, float eps, const int *pos_dev,
                     cudaStream_t st, size_t cstride = 0);
// Causal GQA flash attention on tensor cores (hd = 256) with the sigmoid
// output gate: y [t, nh·hd] bf16.
int launch_flash_attn(bf16_t *y, const bf16_t *q, const bf16_t *kc, const bf16_t *vc, const bf16_t *gate, int ldg,
                      int t, int pos0, int nh, int nkv, int hd, float scale, cudaStream_t st);
// One query token over the first *pos_dev + 1 cache rows (split keys, then
// combine and gate); part holds attn_decode_part_bytes(nh, cap) a row. With
// rows > 1, row r's query is q + r·nh·hd, its caches kc/vc + r·cstride, its
// gate gate + r·ldg and its output y + r·nh·hd.
size_t attn_decode_part_bytes(int nh, int cap);
int launch_attn_decode(bf16_t *y, float *part, const bf16_t *q, const bf16_t *kc, const bf16_t *vc,
                       const bf16_t *gate, int nh, int nkv, int hd, int cap, float scale, const int *pos_dev,
                       cudaStream_t st, int rows = 1, size_t cstride = 0, int ldg = 0);
