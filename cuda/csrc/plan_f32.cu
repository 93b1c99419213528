// plan_f32.cu: the fp32 forms of the block plan's ops, for the "cuda-fp32"
// model (DevModel with d.f32): the same steps as plan.cu, in the same
// order, with every weight, activation, state and cache in fp32 and cuBLAS
// in its pedantic fp32 mode (no TF32). It is the GPU's reference, held to
// transformers' fp32 at the CPU backends' bar, so each op takes the most
// exact form the library has rather than the fastest:
//   - the projections are fp32 GEMMs (a decode step is the one-row GEMM);
//   - the delta rule is the per-token recurrence (the chunked kernel keeps
//     the cumulative log-decay γ in fp32, which at |γ| ≈ 100 moves e^γ by
//     about 1e-5);
//   - attention is the fp32 online-softmax kernel over the fp32 cache;
//   - the router selects as torch.topk does on the CPU (moe_f32.cu).
// Decode is the one-row walk of these forms, with no graph. Any head dims
// are taken (attention up to 256).
#include <math.h>

#include "model.cuh"

int qr_gemm_f32(float *y, int ldy, const float *x, int ldx, const float *w, int ldw, int m, int n, int k, int acc,
                cudaStream_t st) {
	if (m == 0)
		return QR_OK;
	const float one = 1.0f, zero = 0.0f;
	QR_CKB(cublasSetStream(g_qr.blas, st));
	QR_CKB(cublasGemmEx(g_qr.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_32F, ldw, x, CUDA_R_32F, ldx,
	                    acc ? &one : &zero, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
	return QR_OK;
}

// ---- small fp32 kernels ----

// q/k RMSNorm (1+w) and partial rotate-half RoPE, keys and values into the
// caches: one warp per (token, head) of qkv [T, ld] (nh × [query | gate],
// then nkv keys, then nkv values), any head dim up to 256 and any even
// rotary dim up to it. The same formulas as k_attn_prep (attn.cu).
__global__ void __launch_bounds__(32) k_attn_prep_f32(float *__restrict__ qn, float *__restrict__ kc,
                                                      float *__restrict__ vc, const float *__restrict__ qkv, int ld,
                                                      int nh, int nkv, int hd, int rot, float theta,
                                                      const float *__restrict__ qw, const float *__restrict__ kw,
                                                      float eps, const int *__restrict__ pos_dev) {
	__shared__ float xs[256];
	const int t = blockIdx.x, j = blockIdx.y, lane = threadIdx.x;
	const int pos = *pos_dev + t;
	const float *row = qkv + (size_t)t * ld;
	if (j >= nh + nkv) { // values go to the cache unchanged
		const float *src = row + (size_t)nh * 2 * hd + (size_t)(j - nh) * hd;
		float *dst = vc + ((size_t)pos * nkv + (j - nh - nkv)) * hd;
		for (int i = lane; i < hd; i += 32)
			dst[i] = src[i];
		return;
	}
	const bool is_q = j < nh;
	const float *src = is_q ? row + (size_t)j * 2 * hd : row + (size_t)nh * 2 * hd + (size_t)(j - nh) * hd;
	float *dst = is_q ? qn + ((size_t)t * nh + j) * hd : kc + ((size_t)pos * nkv + (j - nh)) * hd;
	const float *w = is_q ? qw : kw;
	float ss = 0.0f;
	for (int i = lane; i < hd; i += 32)
		ss = fmaf(src[i], src[i], ss);
	const float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
	for (int i = lane; i < hd; i += 32)
		xs[i] = src[i] * inv * (1.0f + w[i]);
	__syncwarp();
	const int half = rot / 2;
	for (int i = lane; i < hd; i += 32) {
		float o = xs[i];
		if (i < rot) {
			const int p = i < half ? i : i - half;
			// torch: inv_freq = 1 / theta^(2p/rot) in fp32; angle = pos * inv_freq in fp32.
			const float invf = 1.0f / powf(theta, (float)(2 * p) / (float)rot);
			float sn, cs;
			sincosf((float)pos * invf, &sn, &cs);
			const float x1 = xs[p], x2 = xs[p + half];
			o = i < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn;
		}
		dst[i] = o;
	}
}

// y[t, h·hd + i] *= σ(gate[t, h·2hd + hd + i]): attention's output gate.
__global__ void k_attn_gate_f32(float *__restrict__ y, const float *__restrict__ qkv, int ld, int T, int nh, int hd) {
	const size_t n = (size_t)T * nh * hd;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const size_t t = i / ((size_t)nh * hd), r = i % ((size_t)nh * hd), h = r / hd, c = r % hd;
		const float g = qkv[t * ld + h * 2 * hd + hd + c];
		y[i] *= 1.0f / (1.0f + expf(-g));
	}
}

// act[t, i] = SiLU(gu[t, i]) · gu[t, I + i] for fp32 rows.
__global__ void k_swiglu_rows_f32(float *__restrict__ act, const float *__restrict__ gu, size_t T, int I) {
	const size_t n = T * I;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const size_t t = i / I, c = i % I;
		act[i] = silu(gu[t * 2 * I + c]) * gu[t * 2 * I + I + c];
	}
}

static unsigned grid_for(size_t n) {
	const size_t b = (n + 255) / 256;
	return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

int launch_swiglu_rows_f32(float *act, const float *gu, int T, int I, cudaStream_t st) {
	if ((size_t)T * I == 0)
		return QR_OK;
	k_swiglu_rows_f32<<<grid_for((size_t)T * I), 256, 0, st>>>(act, gu, (size_t)T, I);
	QR_CKL("swiglu_rows_f32");
	return QR_OK;
}

int DevModel::gemm_acc_rec_f32(const PlanStep &s, int slot, float *y, const float *x, const float *w, int m, int n,
                               int k, cudaStream_t st) {
	if (!tracing(s, slot))
		return qr_gemm_f32(y, n, x, k, w, k, m, n, k, 1, st);
	QR_TRY(trace_grow(m));
	float *tmp = trace->tmp.as<float>();
	QR_TRY(qr_gemm_f32(tmp, n, x, k, w, k, m, n, k, 0, st));
	QR_TRY(rec(s, slot, tmp, 0, n, m, n, m, n, 0));
	return launch_add_f32(y, tmp, (size_t)m * n, st);
}

// ---- the ops ----

int DevModel::step_f32(const PlanStep &s, int T, int rows, cudaStream_t st) {
	const int H = d.hidden, I = d.inter, qd = d.nh * d.hd, hv = d.nv * d.dv, qk = d.nk * d.dk;
	float *X = x.as<float>();
	float *XN = xn.as<float>();
	Block *b = s.layer >= 0 ? blocks[s.layer].get() : nullptr;
	GdnLayer *L = b ? b->gdn.get() : nullptr;
	AttnW *A = b ? b->attn.get() : nullptr;
	float *QKV = big.as<float>();
	float *P = gacts.proj.as<float>(); // [T, NIN]: qkv | z | b | a
	const int C = L ? L->C : 0, NIN = L ? L->NIN : 0;
	switch (s.op) {
	case QR_OP_EMBED:
		QR_TRY(set_dev_int(d_pos.as<int>(), pos, st));
		return launch_embed_f32(X, embed.as<float>(), ids.as<int32_t>(), T, H, st);
	case QR_OP_NORM: {
		const bool head = s.layer < 0;
		const int n = head ? rows : T;
		const float *w = (head ? final_norm : s.arg == QR_W_INPUT_NORM ? b->in_norm : b->post_norm).as<float>();
		return launch_rmsnorm(XN, 0, X + (size_t)(T - n) * H, 0, n, H, w, d.eps, 1, st);
	}
	case QR_OP_RECORD: return QR_OK;
	case QR_OP_GDN_IN_PROJ:
		return qr_gemm_f32(P, NIN, XN, H, L->w_in.as<float>(), H, T, NIN, H, 0, st);
	case QR_OP_GDN_CONV:
		QR_TRY(launch_conv(gacts.u.p, 0, C, P, 0, NIN, T, C, L->conv_w.as<float>(), d.kconv, L->conv_state[L->cs].p,
		                   L->conv_state[L->cs ^ 1].p, st));
		L->cs ^= 1;
		return QR_OK;
	case QR_OP_GDN_PREP:
		return launch_gdn_prep_f32(gacts.qn.as<float>(), gacts.kn.as<float>(), gacts.g.as<float>(),
		                           gacts.beta.as<float>(), gacts.u.as<float>(), C, P + C + hv, NIN, T, d.nk, d.nv,
		                           d.dk, L->a_log.as<float>(), L->dt_bias.as<float>(), st);
	case QR_OP_GDN_CORE: {
		GdnArgs a{};
		a.T = T, a.NK = d.nk, a.NV = d.nv, a.DK = d.dk, a.DV = d.dv;
		a.q = gacts.qn.p, a.ldq = qk, a.k = gacts.kn.p, a.ldk = qk;
		a.v = gacts.u.as<float>() + 2 * qk, a.ldv = C; // the conv output's value channels
		a.g = gacts.g.as<float>(), a.beta = gacts.beta.as<float>();
		a.out = gacts.o.p, a.ldo = hv, a.state = L->rec_state.as<float>();
		return gdn_recurrent(a, 0, 0, st);
	}
	case QR_OP_GDN_NORM:
		return launch_gated_rmsnorm(gacts.y.p, 0, hv, gacts.o.p, 0, hv, P + C, 0, NIN, T, d.nv, d.dv,
		                            L->norm_w.as<float>(), d.eps, st);
	case QR_OP_GDN_OUT: return gemm_acc_rec_f32(s, 0, X, gacts.y.as<float>(), L->w_out.as<float>(), T, H, hv, st);
	case QR_OP_ATT_QKV:
		return qr_gemm_f32(QKV, NQKV, XN, H, A->w_qkv.as<float>(), H, T, NQKV, H, 0, st);
	case QR_OP_ATT_PREP:
		k_attn_prep_f32<<<dim3(T, d.nh + 2 * d.nkv), 32, 0, st>>>(qn.as<float>(), A->kc.as<float>(), A->vc.as<float>(),
		                                                         QKV, NQKV, d.nh, d.nkv, d.hd, d.rot, d.theta,
		                                                         A->qnorm.as<float>(), A->knorm.as<float>(), d.eps,
		                                                         d_pos.as<int>());
		QR_CKL("attn_prep_f32");
		return QR_OK;
	case QR_OP_ATT_CORE: {
		float *Y = ya.as<float>();
		QR_TRY(launch_attention(Y, qn.as<float>(), A->kc.as<float>(), A->vc.as<float>(), T, pos + T, d.nh, d.nkv, d.hd,
		                        1.0f / sqrtf((float)d.hd), st));
		QR_TRY(rec(s, 0, Y, 0, qd, T, qd, T, d.nh, d.hd)); // before the output gate
		k_attn_gate_f32<<<grid_for((size_t)T * qd), 256, 0, st>>>(Y, QKV, NQKV, T, d.nh, d.hd);
		QR_CKL("attn_gate_f32");
		return QR_OK;
	}
	case QR_OP_ATT_OUT: return gemm_acc_rec_f32(s, 0, X, ya.as<float>(), A->w_o.as<float>(), T, H, qd, st);
	case QR_OP_MLP_GATE_UP:
		QR_TRY(qr_gemm_f32(QKV, 2 * I, XN, H, b->w_gu.as<float>(), H, T, 2 * I, H, 0, st));
		QR_TRY(mark(ST_MLP_ACT, st));
		return launch_swiglu_rows_f32(act.as<float>(), QKV, T, I, st);
	case QR_OP_MLP_DOWN: return gemm_acc_rec_f32(s, 0, X, act.as<float>(), b->w_down.as<float>(), T, H, I, st);
	case QR_OP_MOE_ROUTE:
	case QR_OP_MOE_EXPERTS:
	case QR_OP_MOE_SHARED:
	case QR_OP_MOE_COMBINE: return moe_step_f32(s, T, st);
	case QR_OP_LM_HEAD:
		return qr_gemm_f32(logits.as<float>(), d.vocab, XN, H, lm_head.as<float>(), H, rows, d.vocab, H, 0, st);
	}
	QR_ARG(false, "model plan: op %d has no fp32 form", s.op);
	return QR_EARG;
}

int DevModel::greedy_plain(int32_t first_id, int n, int32_t *out_ids) {
	cudaStream_t st = g_qr.stream;
	QR_TRY(ensure_acts(1));
	QR_TRY(ensure_logits(1));
	int32_t id = first_id;
	for (int i = 0; i < n; i++) {
		QR_CK(cudaMemcpyAsync(ids.p, &id, 4, cudaMemcpyHostToDevice, st));
		QR_TRY(prefill(1, 1));
		QR_TRY(launch_argmax_next(st)); // ids[0] = the argmax
		QR_CK(cudaMemcpyAsync(&id, ids.p, 4, cudaMemcpyDeviceToHost, st));
		QR_CK(cudaStreamSynchronize(st));
		out_ids[i] = id;
	}
	return QR_OK;
}
