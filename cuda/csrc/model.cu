// model.cu: the whole model on the device: its small kernels (embedding,
// SwiGLU rows, argmax, weight generation), DevModel's weights, states and
// buffers, and the prefill and decode walks of the plan, whose ops are
// plan.cu's.
#include <math.h>
#include <string.h>

#include "model.cuh"

// ---- small kernels ----

__global__ void k_set_int(int *p, int v) { *p = v; }
__global__ void k_inc_int(int *p) { *p += 1; }

int set_dev_int(int *p, int v, cudaStream_t st) {
	k_set_int<<<1, 1, 0, st>>>(p, v);
	QR_CKL("set_int");
	return QR_OK;
}

// x[t, :] = E[ids[t], :] as fp32; one block per token.
template <typename TE>
__global__ void k_embed(float *__restrict__ x, const TE *__restrict__ E, const int32_t *__restrict__ ids, int H) {
	const size_t t = blockIdx.x;
	const TE *row = E + (size_t)ids[t] * H;
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		x[t * H + i] = ldf(row + i);
}

// act[t, i] = SiLU(gu[t, i]) · gu[t, I + i], 8 values per thread (I % 8 == 0).
__global__ void k_swiglu_rows(bf16_t *__restrict__ act, const bf16_t *__restrict__ gu, int T, int I) {
	const size_t n8 = (size_t)T * I / 8;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
		const size_t t = i / (I / 8), c = (i % (I / 8)) * 8;
		const uint4 g = *(const uint4 *)(gu + t * 2 * I + c), u = *(const uint4 *)(gu + t * 2 * I + I + c);
		const unsigned gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
		unsigned r[4];
#pragma unroll
		for (int j = 0; j < 4; j++)
			r[j] = pack_bf2(silu(__uint_as_float(gw[j] << 16)) * __uint_as_float(uw[j] << 16),
			                silu(__uint_as_float(gw[j] & 0xffff0000u)) * __uint_as_float(uw[j] & 0xffff0000u));
		*(uint4 *)(act + t * I + c) = make_uint4(r[0], r[1], r[2], r[3]);
	}
}

// The better of two (value, index) candidates: the larger value, ties to
// the lower index; a NaN never wins (model.Argmax skips them).
__device__ __forceinline__ void amax_take(float &best, int &bi, float v, int i) {
	if (v > best || (v == best && i < bi)) {
		best = v;
		bi = i;
	}
}

// The block's best (value, index) over its candidates, in thread 0.
__device__ __forceinline__ void amax_block(float &best, int &bi) {
	__shared__ float sv[32];
	__shared__ int si[32];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		const float ov = __shfl_xor_sync(0xffffffffu, best, o);
		const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		amax_take(best, bi, ov, oi);
	}
	if ((threadIdx.x & 31) == 0) {
		sv[threadIdx.x >> 5] = best;
		si[threadIdx.x >> 5] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		for (int w = 1; w < (int)(blockDim.x >> 5); w++)
			amax_take(best, bi, sv[w], si[w]);
}

// ids[0] = argmax(logits[0:n]), ties to the lowest index (model.Argmax), in
// two passes: AMAX_BLOCKS blocks each reduce a stride of the logits to one
// candidate, then one block picks among them. A single block read the 1 MB
// of a 248k vocabulary at one SM's bandwidth, 94 µs a token.
#define AMAX_BLOCKS 128
__global__ void __launch_bounds__(256) k_argmax_part(float *__restrict__ pv, int *__restrict__ pi,
                                                     const float *__restrict__ v, int n) {
	pdl_trigger();
	pdl_wait(); // the logits are the kernel before's output
	float best = -INFINITY;
	int bi = 0x7fffffff;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		if (v[i] > best) // strict, and i rises: the first (lowest) index of this thread wins ties
			best = v[i], bi = i;
	amax_block(best, bi);
	if (threadIdx.x == 0)
		pv[blockIdx.x] = best, pi[blockIdx.x] = bi;
}
__global__ void __launch_bounds__(AMAX_BLOCKS) k_argmax_final(int32_t *__restrict__ out, const float *__restrict__ pv,
                                                            const int *__restrict__ pi) {
	pdl_trigger();
	pdl_wait();
	float best = pv[threadIdx.x];
	int bi = pi[threadIdx.x];
	amax_block(best, bi);
	if (threadIdx.x == 0)
		out[0] = bi == 0x7fffffff ? 0 : bi;
}

// N(0, std²) from a counter-based hash: Box–Muller on the 24-bit halves of
// one 64-bit hash per element; T is bf16_t, or float in the fp32 model (the
// same values, unrounded).
template <typename T> __global__ void k_fill_normal(T *__restrict__ dst, size_t n, uint64_t seed, float std) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const uint64_t h = mix64(seed * 0x100000001b3ull + i);
		const float u1 = ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f); // (0, 1)
		const float u2 = (float)(h & 0xffffffu) * (1.0f / 16777216.0f);     // [0, 1)
		stf(dst + i, std * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
	}
}

static unsigned grid_cap(size_t n, int per) {
	size_t b = (n + per - 1) / per;
	const size_t cap = (size_t)(g_qr.sm_count > 0 ? g_qr.sm_count : 132) * 32;
	return (unsigned)(b < 1 ? 1 : (b > cap ? cap : b));
}

int launch_swiglu_rows(bf16_t *act, const bf16_t *gu, int T, int I, cudaStream_t st) {
	k_swiglu_rows<<<grid_cap((size_t)T * I / 8, 256), 256, 0, st>>>(act, gu, T, I);
	QR_CKL("swiglu_rows");
	return QR_OK;
}

// ---- setup ----

static int sync_stream() {
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return QR_OK;
}

static int mal(DevBuf &b, size_t bytes, size_t &acct) {
	QR_TRY(b.alloc(bytes));
	acct += bytes;
	return QR_OK;
}

int DevModel::create(const qr_model_dims &dd, const int32_t *kinds) {
	d = dd;
	QR_ARG(d.f32 == 0 || d.f32 == 1, "model: precision flag %d (0 bf16, 1 fp32)", d.f32);
	f32 = d.f32 == 1;
	// The bf16 kernels' vector loads need widths in multiples of 8; the fp32
	// ones (cuBLAS and SIMT kernels) take any width.
	const int vw = f32 ? 1 : 8;
	QR_ARG(d.vocab > 0 && d.hidden > 0 && d.hidden % vw == 0 && d.nlayers > 0,
	       "model: bad sizes vocab=%d hidden=%d layers=%d", d.vocab, d.hidden, d.nlayers);
	for (int l = 0; l < d.nlayers; l++) {
		QR_ARG(kinds[l] >= 0 && kinds[l] <= 3, "model: layer %d kind %d", l, kinds[l]);
		(kinds[l] & 2 ? any_moe : any_dense) = true;
	}
	QR_ARG(!any_dense || (d.inter > 0 && d.inter % vw == 0), "model: dense MLP width %d: want a positive multiple of %d",
	       d.inter, vw);
	QR_ARG(!any_moe || (d.experts > 0 && d.experts <= MOE_MAX_EXPERTS && d.topk > 0 && d.topk <= d.experts &&
	                    d.topk <= MOE_MAX_TOPK && d.moe_inter > 0 && d.moe_inter % vw == 0 && d.shared_inter > 0 &&
	                    d.shared_inter % vw == 0 && (f32 || (d.hidden <= 24576 && d.shared_inter <= 24576))),
	       "model: MoE of %d experts, top-%d, widths %d and %d: the device takes up to %d experts, top-%d, widths "
	       "that are multiples of 8 (shared and hidden up to 24576)",
	       d.experts, d.topk, d.moe_inter, d.shared_inter, MOE_MAX_EXPERTS, MOE_MAX_TOPK);
	if (!any_dense)
		d.inter = 0;
	if (f32) {
		QR_ARG(d.dk > 0 && d.dk <= 1024 && d.dv > 0 && d.nk > 0 && d.nv % d.nk == 0 && d.kconv > 0 && d.kconv <= 8,
		       "model: GDN heads need dk <= 1024 (got %d), nv %% nk == 0, conv <= 8", d.dk);
		QR_ARG(d.hd > 0 && d.hd <= 256 && d.nh > 0 && d.nkv > 0 && d.nh % d.nkv == 0 && d.rot > 0 && d.rot % 2 == 0 &&
		           d.rot <= d.hd,
		       "model: attention needs head dim <= 256 (got %d), nh %% nkv == 0, an even rotary dim up to it (got %d)",
		       d.hd, d.rot);
	} else {
		QR_ARG(d.dk == 128 && d.dv == 128 && d.nk > 0 && d.nv % d.nk == 0 && d.kconv > 0 && d.kconv <= 8,
		       "model: GDN heads need dk = dv = 128 (got %d/%d), nv %% nk == 0, conv <= 8", d.dk, d.dv);
		QR_ARG(d.hd == 256 && d.nh > 0 && d.nkv > 0 && d.nh % d.nkv == 0 && (d.rot == 64 || d.rot == 128),
		       "model: attention needs head dim 256 (got %d), nh %% nkv == 0, rotary dim 64 or 128", d.hd);
	}
	QR_ARG(d.max_tokens > 0, "model: max_tokens %d", d.max_tokens);
	NQKV = d.nh * 2 * d.hd + 2 * d.nkv * d.hd;
	const size_t H = d.hidden, I = d.inter, V = d.vocab, ws = es();
	QR_TRY(mal(embed, V * H * ws, w_bytes));
	QR_TRY(mal(lm_head, V * H * ws, w_bytes));
	QR_TRY(mal(final_norm, H * 4, w_bytes));
	bool any_attn = false;
	for (int l = 0; l < d.nlayers; l++) {
		std::unique_ptr<Block> b(new Block);
		b->kind = kinds[l] & 1;
		QR_TRY(mal(b->in_norm, H * 4, w_bytes));
		QR_TRY(mal(b->post_norm, H * 4, w_bytes));
		if (kinds[l] & 2) {
			const size_t E = d.experts, IE = d.moe_inter, IS = d.shared_inter;
			b->moe.reset(new MoeW);
			MoeW &M = *b->moe;
			QR_TRY(mal(M.router, (size_t)moe_router_rows(d.experts) * H * ws, w_bytes));
			QR_CK(cudaMemsetAsync(M.router.p, 0, (size_t)moe_router_rows(d.experts) * H * ws, g_qr.stream));
			QR_TRY(mal(M.shared_gu, 2 * IS * H * ws, w_bytes));
			QR_TRY(mal(M.shared_down, H * IS * ws, w_bytes));
			QR_TRY(mal(M.gate_up, E * 2 * IE * H * ws, w_bytes));
			QR_TRY(mal(M.down, E * H * IE * ws, w_bytes));
		} else {
			QR_TRY(mal(b->w_gu, 2 * I * H * ws, w_bytes));
			QR_TRY(mal(b->w_down, H * I * ws, w_bytes));
		}
		if (b->kind == 0) {
			qr_gdn_dims gd = {d.hidden, d.nk, d.nv, d.dk, d.dv, d.kconv, d.eps};
			b->gdn.reset(new GdnLayer);
			GdnLayer &L = *b->gdn;
			QR_TRY(L.dims(gd));
			L.acts = &gacts;
			L.es = ws;
			QR_TRY(L.alloc_weights());
			w_bytes += ((size_t)L.NIN * H + H * d.nv * d.dv) * ws + ((size_t)L.C * d.kconv + 2 * d.nv + d.dv) * 4;
			s_bytes += 2 * (size_t)d.kconv * L.C * ws + (size_t)d.nv * d.dk * d.dv * 4;
		} else {
			any_attn = true;
			b->attn.reset(new AttnW);
			AttnW &A = *b->attn;
			QR_TRY(mal(A.w_qkv, (size_t)NQKV * H * ws, w_bytes));
			QR_TRY(mal(A.w_o, H * d.nh * d.hd * ws, w_bytes));
			QR_TRY(mal(A.qnorm, (size_t)d.hd * 4, w_bytes));
			QR_TRY(mal(A.knorm, (size_t)d.hd * 4, w_bytes));
			QR_TRY(mal(A.kc, (size_t)d.max_tokens * d.nkv * d.hd * ws, s_bytes));
			QR_TRY(mal(A.vc, (size_t)d.max_tokens * d.nkv * d.hd * ws, s_bytes));
		}
		blocks.push_back(std::move(b));
	}
	QR_TRY(mal(d_pos, 4, s_bytes));
	QR_TRY(mal(amax, AMAX_BLOCKS * 8, s_bytes));
	if (any_attn && !f32) // the split-key decode attention's partials
		QR_TRY(mal(part, attn_decode_part_bytes(d.nh, d.max_tokens), s_bytes));
	return reset();
}

// Host-side values for the small vectors (norm weights, conv taps, gates).
static void host_uniform(std::vector<float> &v, uint64_t seed, float lo, float hi) {
	for (size_t i = 0; i < v.size(); i++)
		v[i] = lo + (hi - lo) * 0.5f * (urand(seed, i) + 1.0f);
}

static int put_f32(DevBuf &b, const std::vector<float> &v) {
	QR_CK(cudaMemcpyAsync(b.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice, g_qr.stream));
	return sync_stream();
}

int DevModel::random(uint64_t seed) {
	cudaStream_t st = g_qr.stream;
	const size_t H = d.hidden, I = d.inter, V = d.vocab;
	uint64_t tid = 0;
	auto sd = [&]() { return mix64(seed ^ (0x5851f42d4c957f2dull * ++tid)); };
	auto normal = [&](void *p, size_t n, double fan_in) -> int {
		const float std = fan_in > 0 ? (float)(1.0 / sqrt(fan_in)) : 1.0f;
		if (f32)
			k_fill_normal<float><<<grid_cap(n, 256), 256, 0, st>>>((float *)p, n, sd(), std);
		else
			k_fill_normal<bf16_t><<<grid_cap(n, 256), 256, 0, st>>>((bf16_t *)p, n, sd(), std);
		QR_CKL("fill_normal");
		return QR_OK;
	};
	auto norm1p = [&](DevBuf &b, size_t n) -> int { // (1+w) norms: U(−0.5, 0.5)
		std::vector<float> v(n);
		host_uniform(v, sd(), -0.5f, 0.5f);
		return put_f32(b, v);
	};
	QR_TRY(normal(embed.p, V * H, 0));
	QR_TRY(normal(lm_head.p, V * H, (double)H));
	QR_TRY(norm1p(final_norm, H));
	for (auto &bp : blocks) {
		Block &b = *bp;
		QR_TRY(norm1p(b.in_norm, H));
		QR_TRY(norm1p(b.post_norm, H));
		if (MoeW *M = b.moe.get()) {
			const size_t E = d.experts, IE = d.moe_inter, IS = d.shared_inter;
			QR_TRY(normal(M->router.p, (E + 1) * H, (double)H));
			QR_TRY(normal(M->shared_gu.p, 2 * IS * H, (double)H));
			QR_TRY(normal(M->shared_down.p, H * IS, (double)IS));
			QR_TRY(normal(M->gate_up.p, E * 2 * IE * H, (double)H));
			QR_TRY(normal(M->down.p, E * H * IE, (double)IE));
		} else {
			QR_TRY(normal(b.w_gu.p, 2 * I * H, (double)H));
			QR_TRY(normal(b.w_down.p, H * I, (double)I));
		}
		if (b.gdn) {
			GdnLayer &L = *b.gdn;
			QR_TRY(normal(L.w_in.p, (size_t)L.NIN * H, (double)H));
			QR_TRY(normal(L.w_out.p, H * d.nv * d.dv, (double)(d.nv * d.dv)));
			std::vector<float> conv((size_t)L.C * d.kconv), alog(d.nv), dtb(d.nv), nw(d.dv);
			const uint64_t cs = sd();
			for (size_t i = 0; i < conv.size(); i++) { // N(0, 0.25): Box–Muller on the host
				const float u1 = 0.5f * (urand(cs, 2 * i) + 1.0f) * 0.999999f + 1e-7f;
				const float u2 = 0.5f * (urand(cs, 2 * i + 1) + 1.0f);
				conv[i] = 0.5f * sqrtf(-2.0f * logf(u1)) * cosf(6.283185307f * u2);
			}
			host_uniform(alog, sd(), 0.05f, 8.0f);
			for (float &a : alog)
				a = logf(a); // A_log = log U(0.05, 8)
			host_uniform(dtb, sd(), -1.0f, 1.0f);
			host_uniform(nw, sd(), 0.5f, 1.5f);
			QR_TRY(put_f32(L.conv_w, conv));
			QR_TRY(put_f32(L.a_log, alog));
			QR_TRY(put_f32(L.dt_bias, dtb));
			QR_TRY(put_f32(L.norm_w, nw));
		} else {
			AttnW &A = *b.attn;
			QR_TRY(normal(A.w_qkv.p, (size_t)NQKV * H, (double)H));
			QR_TRY(normal(A.w_o.p, H * d.nh * d.hd, (double)(d.nh * d.hd)));
			QR_TRY(norm1p(A.qnorm, d.hd));
			QR_TRY(norm1p(A.knorm, d.hd));
		}
	}
	return sync_stream();
}

// Where tensor `which` of `layer` lives: its buffer, offset and element
// count, and whether it is a matrix (bf16, or fp32 in the fp32 model; else
// an fp32 vector).
int DevModel::locate(int layer, int which, int part, DevBuf **buf, size_t *off, size_t *count, bool *mat) {
	const size_t H = d.hidden, I = d.inter, V = d.vocab;
	Block *b = nullptr;
	const bool per_expert = which >= QR_W_MOE_GATE && which <= QR_W_MOE_DOWN;
	QR_ARG(per_expert ? part >= 0 && part < d.experts : part == 0, "model tensor %d: part %d", which, part);
	if (which > QR_W_FINAL_NORM) {
		QR_ARG(layer >= 0 && layer < d.nlayers, "model tensor: layer %d", layer);
		b = blocks[layer].get();
		const bool need_gdn = which >= QR_W_GDN_QKV && which <= QR_W_GDN_NORM;
		const bool need_att = which >= QR_W_ATT_Q && which <= QR_W_ATT_KNORM;
		const bool need_moe = which >= QR_W_MOE_ROUTER && which <= QR_W_MOE_DOWN;
		const bool need_dense = which >= QR_W_MLP_GATE && which <= QR_W_MLP_DOWN;
		QR_ARG(!(need_gdn && !b->gdn) && !(need_att && !b->attn) && !(need_moe && !b->moe) &&
		           !(need_dense && b->moe),
		       "model tensor %d on layer %d of kind %d%s", which, layer, b->kind, b->moe ? " (MoE)" : "");
	}
	GdnLayer *L = b ? b->gdn.get() : nullptr;
	AttnW *A = b ? b->attn.get() : nullptr;
	MoeW *M = b ? b->moe.get() : nullptr;
	const size_t E = d.experts, IE = d.moe_inter, IS = d.shared_inter, ex = part;
	const size_t hv = (size_t)d.nv * d.dv, qd = (size_t)d.nh * d.hd, kvd = (size_t)d.nkv * d.hd;
	*off = 0;
	*mat = true;
	switch (which) {
	case QR_W_EMBED: *buf = &embed, *count = V * H; break;
	case QR_W_LM_HEAD: *buf = &lm_head, *count = V * H; break;
	case QR_W_FINAL_NORM: *buf = &final_norm, *count = H, *mat = false; break;
	case QR_W_INPUT_NORM: *buf = &b->in_norm, *count = H, *mat = false; break;
	case QR_W_POST_NORM: *buf = &b->post_norm, *count = H, *mat = false; break;
	case QR_W_MLP_GATE: *buf = &b->w_gu, *count = I * H; break;
	case QR_W_MLP_UP: *buf = &b->w_gu, *off = I * H, *count = I * H; break;
	case QR_W_MLP_DOWN: *buf = &b->w_down, *count = H * I; break;
	case QR_W_GDN_QKV: *buf = &L->w_in, *count = (size_t)L->C * H; break;
	case QR_W_GDN_Z: *buf = &L->w_in, *off = (size_t)L->C * H, *count = hv * H; break;
	case QR_W_GDN_B: *buf = &L->w_in, *off = (L->C + hv) * H, *count = d.nv * H; break;
	case QR_W_GDN_A: *buf = &L->w_in, *off = (L->C + hv + d.nv) * H, *count = d.nv * H; break;
	case QR_W_GDN_OUT: *buf = &L->w_out, *count = H * hv; break;
	case QR_W_GDN_CONV: *buf = &L->conv_w, *count = (size_t)L->C * d.kconv, *mat = false; break;
	case QR_W_GDN_ALOG: *buf = &L->a_log, *count = d.nv, *mat = false; break;
	case QR_W_GDN_DTBIAS: *buf = &L->dt_bias, *count = d.nv, *mat = false; break;
	case QR_W_GDN_NORM: *buf = &L->norm_w, *count = d.dv, *mat = false; break;
	case QR_W_ATT_Q: *buf = &A->w_qkv, *count = 2 * qd * H; break;
	case QR_W_ATT_K: *buf = &A->w_qkv, *off = 2 * qd * H, *count = kvd * H; break;
	case QR_W_ATT_V: *buf = &A->w_qkv, *off = (2 * qd + kvd) * H, *count = kvd * H; break;
	case QR_W_ATT_O: *buf = &A->w_o, *count = H * qd; break;
	case QR_W_ATT_QNORM: *buf = &A->qnorm, *count = d.hd, *mat = false; break;
	case QR_W_ATT_KNORM: *buf = &A->knorm, *count = d.hd, *mat = false; break;
	case QR_W_MOE_ROUTER: *buf = &M->router, *count = E * H; break;
	case QR_W_MOE_SHARED_PROB: *buf = &M->router, *off = E * H, *count = H; break;
	case QR_W_MOE_SHARED_GATE: *buf = &M->shared_gu, *count = IS * H; break;
	case QR_W_MOE_SHARED_UP: *buf = &M->shared_gu, *off = IS * H, *count = IS * H; break;
	case QR_W_MOE_SHARED_DOWN: *buf = &M->shared_down, *count = H * IS; break;
	case QR_W_MOE_GATE: *buf = &M->gate_up, *off = ex * 2 * IE * H, *count = IE * H; break;
	case QR_W_MOE_UP: *buf = &M->gate_up, *off = (ex * 2 + 1) * IE * H, *count = IE * H; break;
	case QR_W_MOE_DOWN: *buf = &M->down, *off = ex * H * IE, *count = H * IE; break;
	default: QR_ARG(false, "model tensor: unknown tensor %d", which);
	}
	return QR_OK;
}

int DevModel::set(int layer, int which, int part, const void *src, size_t n, int src_bf16) {
	DevBuf *buf;
	size_t off, want;
	bool mat;
	QR_TRY(locate(layer, which, part, &buf, &off, &want, &mat));
	QR_ARG(n == want, "model set: tensor %d of layer %d has %zu values, want %zu", which, layer, n, want);
	cudaStream_t st = g_qr.stream;
	if (!mat) {
		QR_ARG(!src_bf16, "model set: vectors are passed as float32");
		QR_CK(cudaMemcpyAsync((float *)buf->p + off, src, n * 4, cudaMemcpyHostToDevice, st));
	} else if (f32 && src_bf16) { // widened exactly on the device
		DevBuf tmp;
		QR_TRY(upload(tmp, (const uint16_t *)src, n));
		QR_TRY(qr_convert_bf16_f32((float *)buf->p + off, tmp.as<bf16_t>(), n, st));
		return sync_stream(); // before tmp is freed
	} else if (f32) {
		QR_CK(cudaMemcpyAsync((float *)buf->p + off, src, n * 4, cudaMemcpyHostToDevice, st));
	} else if (src_bf16) {
		QR_CK(cudaMemcpyAsync((bf16_t *)buf->p + off, src, n * 2, cudaMemcpyHostToDevice, st));
	} else {
		DevBuf tmp;
		QR_TRY(upload(tmp, (const float *)src, n));
		QR_TRY(qr_convert_f32_bf16((bf16_t *)buf->p + off, tmp.as<float>(), n, st));
		return sync_stream(); // before tmp is freed
	}
	return sync_stream();
}

int DevModel::get(int layer, int which, int part, void *dst, size_t n) {
	DevBuf *buf;
	size_t off, want;
	bool mat;
	QR_TRY(locate(layer, which, part, &buf, &off, &want, &mat));
	QR_ARG(n == want, "model get: tensor %d of layer %d has %zu values, asked for %zu", which, layer, want, n);
	const size_t sz = mat ? es() : 4;
	QR_CK(cudaMemcpyAsync(dst, (const char *)buf->p + off * sz, n * sz, cudaMemcpyDeviceToHost, g_qr.stream));
	return sync_stream();
}

int DevModel::reset() {
	cudaStream_t st = g_qr.stream;
	for (auto &bp : blocks) {
		if (GdnLayer *L = bp->gdn.get()) {
			for (int i = 0; i < 2; i++) // every batch row
				QR_CK(cudaMemsetAsync(L->conv_state[i].p, 0, L->conv_state[i].bytes, st));
			QR_CK(cudaMemsetAsync(L->rec_state.p, 0, L->rec_state.bytes, st));
			L->cs = 0;
		}
	}
	pos = 0;
	for (auto &bp : blocks)
		bp->len = 0;
	k_set_int<<<1, 1, 0, st>>>(d_pos.as<int>(), 0);
	QR_CKL("set_int");
	return QR_OK;
}

int DevModel::ensure_acts(int T) {
	if (T <= tcap)
		return QR_OK;
	drop_graphs(); // the captured steps point at the buffers being replaced
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	const size_t H = d.hidden, I = d.inter, V = d.vocab, qd = (size_t)d.nh * d.hd;
	size_t wbig = (size_t)(NQKV > 2 * d.inter ? NQKV : 2 * d.inter);
	if (any_moe && (size_t)2 * d.shared_inter > wbig)
		wbig = (size_t)2 * d.shared_inter;
	DevBuf *b[7] = {&ids, &x, &xn, &big, &act, &qn, &ya};
	const size_t e = es();
	const size_t sz[7] = {(size_t)T * 4, T * H * 4, T * H * e, T * wbig * e, T * I * e, T * qd * e, T * qd * e};
	a_bytes = (size_t)lcap * V * 4;
	for (int i = 0; i < 7; i++) {
		if (b[i]->p) {
			QR_CK(cudaFree(b[i]->p));
			b[i]->p = nullptr;
		}
		QR_TRY(b[i]->alloc(sz[i]));
		a_bytes += sz[i];
	}
	if (!blocks.empty()) {
		qr_gdn_dims gd = {d.hidden, d.nk, d.nv, d.dk, d.dv, d.kconv, d.eps};
		const int C = 2 * d.nk * d.dk + d.nv * d.dv;
		QR_TRY(gacts.alloc(gd, C, C + d.nv * d.dv + 2 * d.nv, T, e));
		a_bytes += gacts.bytes;
	}
	if (any_moe)
		QR_TRY(macts.alloc(d, T, a_bytes));
	tcap = T;
	return QR_OK;
}

// Logits rows are sized apart from the activations: a prefill that wants
// only the last row's logits needs [1, V], not [T, V] (8 GB at T = 8192 on
// a 248k vocabulary).
int DevModel::ensure_logits(int rows) {
	if (rows <= lcap)
		return QR_OK;
	drop_graphs();
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	if (logits.p) {
		QR_CK(cudaFree(logits.p));
		logits.p = nullptr;
	}
	a_bytes -= (size_t)lcap * d.vocab * 4;
	QR_TRY(logits.alloc((size_t)rows * d.vocab * 4));
	a_bytes += (size_t)rows * d.vocab * 4;
	lcap = rows;
	return QR_OK;
}

// ---- forward: walks of the plan (plan.cu) ----

int launch_embed(float *x, const bf16_t *E, const int32_t *ids, int T, int H, cudaStream_t st) {
	k_embed<bf16_t><<<T, 256, 0, st>>>(x, E, ids, H);
	QR_CKL("embed");
	return QR_OK;
}

int launch_embed_f32(float *x, const float *E, const int32_t *ids, int T, int H, cudaStream_t st) {
	k_embed<float><<<T, 256, 0, st>>>(x, E, ids, H);
	QR_CKL("embed_f32");
	return QR_OK;
}

int DevModel::launch_argmax_next(cudaStream_t st) {
	float *pv = amax.as<float>();
	int *pi = (int *)(pv + AMAX_BLOCKS);
	QR_TRY(launch_pdl(k_argmax_part, dim3(AMAX_BLOCKS), dim3(256), 0, st, pv, pi, logits.as<const float>(), d.vocab));
	QR_TRY(launch_pdl(k_argmax_final, dim3(1), dim3(AMAX_BLOCKS), 0, st, ids.as<int32_t>(), (const float *)pv,
	                  (const int *)pi));
	k_inc_int<<<1, 1, 0, st>>>(d_pos.as<int>());
	QR_CKL("inc_int");
	return QR_OK;
}

void DevModel::drop_graphs() {
	for (cudaGraphExec_t *g : {&graph, &step_graph, &batch_graph})
		if (*g) {
			cudaGraphExecDestroy(*g);
			*g = nullptr;
		}
}

int DevModel::fill_normal(bf16_t *dst, size_t n, uint64_t seed) {
	k_fill_normal<bf16_t><<<grid_cap(n, 256), 256, 0, g_qr.stream>>>(dst, n, seed, 1.0f);
	QR_CKL("fill_normal");
	return QR_OK;
}

// Decode updates conv_state[0] in place (graph-stable pointers): bring the
// state there if a prefill's ping-pong left it in [1].
int settle_conv_state(GdnLayer &L, int kconv, cudaStream_t st) {
	if (L.cs == 1) {
		QR_CK(cudaMemcpyAsync(L.conv_state[0].p, L.conv_state[1].p, (size_t)kconv * L.C * L.es,
		                      cudaMemcpyDeviceToDevice, st));
		L.cs = 0;
	}
	return QR_OK;
}

int DevModel::prefill(int T, int last_only) {
	cudaStream_t st = g_qr.stream;
	QR_ARG(T > 0 && pos + T <= d.max_tokens, "model: %d tokens at position %d exceed max_tokens %d", T, pos,
	       d.max_tokens);
	if (trace)
		last_only = 0; // the recorder's final_norm has every row
	QR_TRY(ensure_acts(T));
	QR_TRY(ensure_logits(last_only ? 1 : T));
	QR_TRY(walk(T, 0, 0, last_only ? 1 : T, -2, false, st));
	QR_TRY(mark(-1, st));
	pos += T;
	for (auto &bp : blocks) {
		bp->len = pos;
		if (GdnLayer *L = bp->gdn.get())
			QR_TRY(settle_conv_state(*L, d.kconv, st));
	}
	return QR_OK;
}

int DevModel::decode_step(int greedy, cudaStream_t st) {
	QR_TRY(walk(1, 1, greedy, 1, -2, false, st)); // marks are no-ops unless a profiled plain-launch step runs
	return mark(-1, st);
}

int DevModel::capture(int greedy, cudaGraphExec_t *out) {
	QR_ARG(!f32, "model: the fp32 model decodes with plain launches, not a graph");
	cudaStream_t st = g_qr.stream;
	QR_TRY(ensure_acts(1));
	QR_TRY(ensure_logits(1));
	QR_CK(cudaStreamSynchronize(st));
	if (!greedy) {
		QR_TRY(h_step.alloc(2 * sizeof(int)));
		QR_TRY(h_logits.alloc((size_t)d.vocab * 4));
	}
	return capture_graph(
	    [&]() -> int {
		    if (!greedy) // NaN where a kernel failed to write
			    QR_TRY(qr_fill_nan(logits.p, (size_t)d.vocab * 4, st));
		    return decode_step(greedy, st);
	    },
	    out);
}

int capture_graph(const std::function<int()> &body, cudaGraphExec_t *out) {
	cudaStream_t st = g_qr.stream;
	cudaGraph_t g = nullptr;
	QR_CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	const int r = body();
	const cudaError_t e = cudaStreamEndCapture(st, &g);
	if (r != QR_OK) {
		if (g)
			cudaGraphDestroy(g);
		return r;
	}
	QR_CK(e);
	const cudaError_t e2 = cudaGraphInstantiate(out, g, 0);
	cudaGraphDestroy(g);
	if (e2 != cudaSuccess) {
		*out = nullptr;
		return qr_cuda_fail(e2, "cudaGraphInstantiate", __FILE__, __LINE__);
	}
	return QR_OK;
}

int DevModel::capture_greedy() { return graph ? QR_OK : capture(1, &graph); }

int DevModel::capture_step() { return step_graph ? QR_OK : capture(0, &step_graph); }

int DevModel::decode_one(int32_t id, float *out) {
	cudaStream_t st = g_qr.stream;
	QR_TRY(ensure_acts(1));
	QR_TRY(ensure_logits(1));
	QR_TRY(capture_step());
	// The last replay finished (every call synchronises), so its inputs
	// and outputs are free to reuse.
	h_step.as<int>()[0] = id;
	h_step.as<int>()[1] = pos;
	QR_CK(cudaMemcpyAsync(ids.p, h_step.as<int>(), 4, cudaMemcpyHostToDevice, st));
	QR_CK(cudaMemcpyAsync(d_pos.p, h_step.as<int>() + 1, 4, cudaMemcpyHostToDevice, st));
	QR_TRY(fwd_mark(0, st));
	QR_CK(cudaGraphLaunch(step_graph, st));
	QR_TRY(fwd_mark(1, st));
	if (out)
		QR_CK(cudaMemcpyAsync(h_logits.p, logits.p, (size_t)d.vocab * 4, cudaMemcpyDeviceToHost, st));
	QR_CK(cudaStreamSynchronize(st));
	QR_TRY(fwd_elapsed());
	pos++;
	if (out)
		memcpy(out, h_logits.p, (size_t)d.vocab * 4);
	return QR_OK;
}
