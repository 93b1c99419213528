// attn.cu: the attention kernels beside the prefill flash attention
// (flash_attn.cu). For the gated full-attention layer of the whole-model
// path (docs/spec.md): q/k RMSNorm(1+w) + partial RoPE with the KV cache
// write, and a split-key decode attention with its combine step.
// For verification and the fp32 reference (cuda-fp32, cuda-ops): an fp32
// flash-style causal GQA attention on host data (qr_attention_forward).
#include <math.h>

#include <vector>

#include "common.cuh"
#include "internal.cuh"

// ---- q/k norm + RoPE + cache write: one warp per (token, head) ----
// qkv [T, ld] bf16 holds per token: nh heads of [query (hd) | gate (hd)],
// then nkv key heads, then nkv value heads. Lane l owns dims l + 32e, so the
// rotate-half pairs (i, i + rot/2) sit in one lane when rot is a multiple of 64.
template <int E, int H32>
__global__ void __launch_bounds__(256) k_attn_prep(bf16_t *__restrict__ qn, bf16_t *__restrict__ kc,
                                                   bf16_t *__restrict__ vc, const bf16_t *__restrict__ qkv, int ld,
                                                   int T, int nh, int nkv, float theta,
                                                   const float *__restrict__ qw, const float *__restrict__ kw,
                                                   float eps, const int *__restrict__ pos_dev, size_t cstride) {
	constexpr int HD = 32 * E;
	pdl_trigger();
	pdl_wait(); // qkv and the position are the kernels before's outputs
	const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	const int per = nh + 2 * nkv;
	if (row >= T * per)
		return;
	const int t = row / per, j = row % per;
	const int pos = *pos_dev + (cstride ? 0 : t); // batch rows share one position, each its own cache
	kc += t * cstride;
	vc += t * cstride;
	const bf16_t *src;
	bf16_t *dst;
	const float *w = nullptr;
	if (j < nh) {
		src = qkv + (size_t)t * ld + (size_t)j * 2 * HD;
		dst = qn + ((size_t)t * nh + j) * HD;
		w = qw;
	} else if (j < nh + nkv) {
		src = qkv + (size_t)t * ld + (size_t)nh * 2 * HD + (size_t)(j - nh) * HD;
		dst = kc + ((size_t)pos * nkv + (j - nh)) * HD;
		w = kw;
	} else { // values go to the cache unchanged
		src = qkv + (size_t)t * ld + (size_t)nh * 2 * HD + (size_t)(j - nh) * HD; // after the nkv key heads
		dst = vc + ((size_t)pos * nkv + (j - nh - nkv)) * HD;
#pragma unroll
		for (int e = 0; e < E; e++)
			dst[lane + 32 * e] = src[lane + 32 * e];
		return;
	}
	float x[E];
	float ss = 0.0f;
#pragma unroll
	for (int e = 0; e < E; e++) {
		x[e] = bf2f(src[lane + 32 * e]);
		ss = fmaf(x[e], x[e], ss);
	}
	const float inv = rsqrtf(warp_sum(ss) / (float)HD + eps);
#pragma unroll
	for (int e = 0; e < E; e++)
		x[e] = x[e] * inv * (1.0f + w[lane + 32 * e]);
	// Rotary dim 64·H32: pairs (e, e + H32) for e < H32.
#pragma unroll
	for (int e = 0; e < H32; e++) {
		const int i = lane + 32 * e;
		// torch: inv_freq = 1 / theta^(2i/rot) in fp32; angle = pos * inv_freq in fp32.
		const float invf = 1.0f / powf(theta, (float)(2 * i) / (float)(64 * H32));
		float s, c;
		sincosf((float)pos * invf, &s, &c);
		const float x1 = x[e], x2 = x[e + H32];
		x[e] = x1 * c - x2 * s;
		x[e + H32] = x2 * c + x1 * s;
	}
#pragma unroll
	for (int e = 0; e < E; e++)
		dst[lane + 32 * e] = f2bf(x[e]);
}

int launch_attn_prep(bf16_t *qn, bf16_t *kc, bf16_t *vc, const bf16_t *qkv, int ld, int t, int nh, int nkv, int hd,
                     int rot, float theta, const float *qw, const float *kw, float eps, const int *pos_dev,
                     cudaStream_t st, size_t cstride) {
	QR_ARG(hd == 256 || hd == 128, "attn prep: head dim %d (128 or 256)", hd);
	QR_ARG(rot == 64 || rot == 128, "attn prep: rotary dim %d (64 or 128)", rot);
	if (t == 0)
		return QR_OK;
	const unsigned nb = cdiv((size_t)t * (nh + 2 * nkv), 8);
	if (hd == 256 && rot == 64)
		return launch_pdl(k_attn_prep<8, 1>, dim3(nb), dim3(256), 0, st, qn, kc, vc, qkv, ld, t, nh, nkv, theta,
		                  qw, kw, eps, pos_dev, cstride);
	if (hd == 256)
		return launch_pdl(k_attn_prep<8, 2>, dim3(nb), dim3(256), 0, st, qn, kc, vc, qkv, ld, t, nh, nkv, theta,
		                  qw, kw, eps, pos_dev, cstride);
	if (rot == 64)
		return launch_pdl(k_attn_prep<4, 1>, dim3(nb), dim3(256), 0, st, qn, kc, vc, qkv, ld, t, nh, nkv, theta,
		                  qw, kw, eps, pos_dev, cstride);
	return launch_pdl(k_attn_prep<4, 2>, dim3(nb), dim3(256), 0, st, qn, kc, vc, qkv, ld, t, nh, nkv, theta,
	                  qw, kw, eps, pos_dev, cstride);
}

// ---- decode attention: one query token, keys split across blocks ----
// The S = *pos_dev + 1 keys (read on the device, so a captured graph replays
// at any position) fall into splits of dec_split(S) keys; block (head, g) of 4 warps
// takes splits g, g + G, … below S (G = gridDim.y, fixed at launch, so the
// work follows the position, not the cache's capacity). In a split, warp w
// takes keys split·dec_split(S) + w, +4, …; lane l holds dims 8l..8l+7 (one
// 16-byte load per key row). Each split's partial (max, sum, unnormalised
// output) goes to part[head][split] (row stride nsp_cap) for the combine.
// Batch row r (blockIdx.z) has its own query, caches (+ r·cstride) and
// partials.
#define DEC_SPL 64 // the shorter split: the partials hold cdiv(cap, DEC_SPL) splits a head
#define DEC_KB 8   // keys a warp loads at once
// Keys a split: 64 below 4096 keys, 128 from there (fewer partials for the
// combine; on the H200 the 35B-A3B's decode at position 8192 took 2.80 ms
// with 128 against 2.84 with 64, and at 2048 2.65 against 2.635).
__device__ __forceinline__ int dec_split(int S) { return S >= 4096 ? 2 * DEC_SPL : DEC_SPL; }
__global__ void __launch_bounds__(128) k_attn_decode(float *__restrict__ part, const bf16_t *__restrict__ q,
                                                     const bf16_t *__restrict__ kc, const bf16_t *__restrict__ vc,
                                                     int nh, int nkv, int nsp_cap, float scale_log2,
                                                     const int *__restrict__ pos_dev, size_t cstride) {
	__shared__ float sm_m[4], sm_l[4], sm_acc[4][256];
	pdl_trigger();
	pdl_wait(); // q, the cache and the position are the kernels before's outputs
	const size_t r = blockIdx.z;
	q += r * nh * 256;
	kc += r * cstride;
	vc += r * cstride;
	part += r * nh * nsp_cap * (256 + 2);
	const int h = blockIdx.x;
	const int hk = h / (nh / nkv), lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int S = *pos_dev + 1;
	const int spl = dec_split(S), nsp = min(nsp_cap, (S + spl - 1) / spl);
	float qv[8];
	{
		const uint4 u = *(const uint4 *)(q + (size_t)h * 256 + 8 * lane);
		const unsigned uw[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			qv[2 * i] = __uint_as_float(uw[i] << 16) * scale_log2;
			qv[2 * i + 1] = __uint_as_float(uw[i] & 0xffff0000u) * scale_log2;
		}
	}
	for (int sp = blockIdx.y; sp < nsp; sp += gridDim.y) { // block-uniform: the barriers below are safe
		float *out = part + ((size_t)h * nsp_cap + sp) * (256 + 2);
		const int k0 = sp * spl, k1 = min(S, k0 + spl);
		float m = -INFINITY, l = 0.0f, acc[8];
#pragma unroll
		for (int i = 0; i < 8; i++)
			acc[i] = 0.0f;
		// DEC_KB keys a warp at a time: all their K and V loads in flight
		// first, then the scores, then one rescale of the running sums (a
		// key at a time was a chain of DRAM round trips, 13 µs at S = 2048).
		for (int j0 = k0 + w; j0 < k1; j0 += 4 * DEC_KB) {
			uint4 ku[DEC_KB], vu[DEC_KB];
#pragma unroll
			for (int b = 0; b < DEC_KB; b++) {
				const int j = j0 + 4 * b;
				const size_t off = ((size_t)(j < k1 ? j : j0) * nkv + hk) * 256 + 8 * lane;
				ku[b] = *(const uint4 *)(kc + off);
				vu[b] = *(const uint4 *)(vc + off);
			}
			float s[DEC_KB];
#pragma unroll
			for (int b = 0; b < DEC_KB; b++) {
				const unsigned kw[4] = {ku[b].x, ku[b].y, ku[b].z, ku[b].w};
				float x = 0.0f;
#pragma unroll
				for (int i = 0; i < 4; i++) {
					x = fmaf(qv[2 * i], __uint_as_float(kw[i] << 16), x);
					x = fmaf(qv[2 * i + 1], __uint_as_float(kw[i] & 0xffff0000u), x);
				}
				s[b] = x;
			}
#pragma unroll
			for (int b = 0; b < DEC_KB; b++)
				s[b] = j0 + 4 * b < k1 ? warp_sum(s[b]) : -INFINITY; // key j0 is always below k1
			float mn = m;
#pragma unroll
			for (int b = 0; b < DEC_KB; b++)
				mn = fmaxf(mn, s[b]);
			const float cr = exp2f(m - mn);
			l *= cr;
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[i] *= cr;
#pragma unroll
			for (int b = 0; b < DEC_KB; b++) {
				const float p = exp2f(s[b] - mn);
				const unsigned vw[4] = {vu[b].x, vu[b].y, vu[b].z, vu[b].w};
				l += p;
#pragma unroll
				for (int i = 0; i < 4; i++) {
					acc[2 * i] = fmaf(p, __uint_as_float(vw[i] << 16), acc[2 * i]);
					acc[2 * i + 1] = fmaf(p, __uint_as_float(vw[i] & 0xffff0000u), acc[2 * i + 1]);
				}
			}
			m = mn;
		}
		if (lane == 0) {
			sm_m[w] = m;
			sm_l[w] = l;
		}
#pragma unroll
		for (int i = 0; i < 8; i++)
			sm_acc[w][8 * lane + i] = acc[i];
		__syncthreads();
		float M = fmaxf(fmaxf(sm_m[0], sm_m[1]), fmaxf(sm_m[2], sm_m[3]));
		float f[4], L = 0.0f;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			f[i] = sm_m[i] == -INFINITY ? 0.0f : exp2f(sm_m[i] - M); // a warp with no keys adds nothing
			L += f[i] * sm_l[i];
		}
		for (int d = threadIdx.x; d < 256; d += 128)
			out[2 + d] = f[0] * sm_acc[0][d] + f[1] * sm_acc[1][d] + f[2] * sm_acc[2][d] + f[3] * sm_acc[3][d];
		if (threadIdx.x == 0) {
			out[0] = M;
			out[1] = L;
		}
		__syncthreads(); // the shared partials are rewritten by the next split
	}
}

// Combine the partials of each head's splits below S and apply the output
// gate: one block of 1024 threads per head, four groups of 256 (one thread
// per dim), group g summing splits g, g + 4, … under its own running
// maximum; the four partial sums are then rescaled to the common maximum
// and added in group order. One group over every split was a chain of
// 3·S/64 loads per thread, 12 µs a layer at S = 2048.
#define COMB_G 4
__global__ void __launch_bounds__(256 * COMB_G) k_attn_combine(bf16_t *__restrict__ y, const float *__restrict__ part,
                                                               int nsp_cap, const bf16_t *__restrict__ gate,
                                                               int ldg, const int *__restrict__ pos_dev) {
	__shared__ float sacc[COMB_G][256], sl[COMB_G], sm[COMB_G];
	pdl_trigger(); // the o_proj GEMV after it may start streaming its weights
	pdl_wait();    // the partials are the kernel before's output
	const size_t r = blockIdx.y; // batch row
	const int nhs = gridDim.x;
	y += r * nhs * 256;
	gate += r * ldg;
	part += r * nhs * nsp_cap * (256 + 2);
	const int h = blockIdx.x, d = threadIdx.x & 255, g = threadIdx.x >> 8;
	const int S = *pos_dev + 1, spl = dec_split(S), nsp = min(nsp_cap, (S + spl - 1) / spl);
	const float *ph = part + (size_t)h * nsp_cap * (256 + 2);
	// One pass: group g keeps a running maximum of its splits and rescales
	// its sums when it grows, so every load of a group is issued at once
	// (a first pass for the maximum was one more round trip, and a branch
	// on each split's maximum made its other loads wait for it).
	float M = -INFINITY, L = 0.0f, acc = 0.0f;
#pragma unroll 4
	for (int s = g; s < nsp; s += COMB_G) {
		const float ms = ph[(size_t)s * 258], ls = ph[(size_t)s * 258 + 1], as = ph[(size_t)s * 258 + 2 + d];
		const float mn = fmaxf(M, ms);
		const float cr = M == -INFINITY ? 0.0f : exp2f(M - mn), f = ms == -INFINITY ? 0.0f : exp2f(ms - mn);
		L = L * cr + f * ls;
		acc = acc * cr + f * as;
		M = mn;
	}
	sacc[g][d] = acc;
	if (d == 0) {
		sl[g] = L;
		sm[g] = M;
	}
	__syncthreads();
	if (g)
		return;
	M = sm[0];
#pragma unroll
	for (int q = 1; q < COMB_G; q++)
		M = fmaxf(M, sm[q]);
	acc = 0.0f;
	L = 0.0f;
#pragma unroll
	for (int q = 0; q < COMB_G; q++) {
		const float f = sm[q] == -INFINITY ? 0.0f : exp2f(sm[q] - M); // a group with no splits adds nothing
		acc += f * sacc[q][d];
		L += f * sl[q];
	}
	const float gv = bf2f(gate[(size_t)h * 512 + 256 + d]);
	y[(size_t)h * 256 + d] = f2bf(acc / L / (1.0f + __expf(-gv)));
}

size_t attn_decode_part_bytes(int nh, int cap) { return (size_t)nh * cdiv(cap, DEC_SPL) * 258 * 4; }

int launch_attn_decode(bf16_t *y, float *part, const bf16_t *q, const bf16_t *kc, const bf16_t *vc,
                       const bf16_t *gate, int nh, int nkv, int hd, int cap, float scale, const int *pos_dev,
                       cudaStream_t st, int rows, size_t cstride, int ldg) {
	QR_ARG(hd == 256 && nh > 0 && nkv > 0 && nh % nkv == 0 && cap > 0, "decode attention: head dim %d (256)", hd);
	QR_ARG(rows == 1 || (rows > 1 && rows <= 65535 && cstride > 0 && ldg > 0), "decode attention: %d rows", rows);
	const int nsp_cap = cdiv(cap, DEC_SPL);
	// About 8 blocks per SM in all: enough to hide latency at short
	// positions, and each block loops over its splits at long ones.
	const int sms = g_qr.sm_count > 0 ? g_qr.sm_count : 132;
	const int want = (int)cdiv(sms * 8, nh * rows), g = want < 1 ? 1 : (want > nsp_cap ? nsp_cap : want);
	QR_TRY(launch_pdl(k_attn_decode, dim3(nh, g, rows), dim3(128), 0, st, part, q, kc, vc, nh, nkv, nsp_cap,
	                  scale * 1.4426950408889634f, pos_dev, cstride));
	return launch_pdl(k_attn_combine, dim3(nh, rows), dim3(256 * COMB_G), 0, st, y, (const float *)part, nsp_cap,
	                  gate, ldg, pos_dev);
}

// ---- fp32 causal GQA attention: one warp per (query, head) ----
// Lane l holds dims l, l+32, ... of q and of the running output; keys are
// visited in order with the online-softmax rescaling (flash style), so
// memory beyond the output is O(1).
#define ATT_MAXD 256
__global__ void __launch_bounds__(128) k_attention_f32(float *__restrict__ out, const float *__restrict__ q,
                                                       const float *__restrict__ k, const float *__restrict__ v, int T,
                                                       int S, int NH, int NKV, int D, float scale) {
	const int t = blockIdx.x * 4 + (threadIdx.x >> 5), h = blockIdx.y, lane = threadIdx.x & 31;
	if (t >= T)
		return;
	const int hk = h / (NH / NKV);
	constexpr int E = ATT_MAXD / 32;
	float qv[E], acc[E];
	const float *qr = q + ((size_t)t * NH + h) * D;
#pragma unroll
	for (int e = 0; e < E; e++) {
		const int i = lane + 32 * e;
		qv[e] = i < D ? qr[i] * scale : 0.0f;
		acc[e] = 0.0f;
	}
	float m = -INFINITY, l = 0.0f;
	const int last = S - T + t;
	for (int j = 0; j <= last; j++) {
		const float *kr = k + ((size_t)j * NKV + hk) * D;
		float s = 0.0f;
#pragma unroll
		for (int e = 0; e < E; e++) {
			const int i = lane + 32 * e;
			if (i < D)
				s = fmaf(qv[e], kr[i], s);
		}
		s = warp_sum(s);
		const float mn = fmaxf(m, s);
		const float corr = expf(m - mn), p = expf(s - mn);
		l = l * corr + p;
		const float *vr = v + ((size_t)j * NKV + hk) * D;
#pragma unroll
		for (int e = 0; e < E; e++) {
			const int i = lane + 32 * e;
			acc[e] = acc[e] * corr + (i < D ? p * vr[i] : 0.0f);
		}
		m = mn;
	}
	float *orow = out + ((size_t)t * NH + h) * D;
	const float il = 1.0f / l;
#pragma unroll
	for (int e = 0; e < E; e++) {
		const int i = lane + 32 * e;
		if (i < D)
			orow[i] = acc[e] * il;
	}
}

int launch_attention(float *out, const float *q, const float *k, const float *v, int t, int s, int nh, int nkv, int d,
                     float scale, cudaStream_t st) {
	QR_ARG(t >= 0 && s >= t && nh > 0 && nkv > 0 && nh % nkv == 0 && d > 0 && d <= ATT_MAXD,
	       "attention: bad dims t=%d s=%d nh=%d nkv=%d d=%d (d <= %d)", t, s, nh, nkv, d, ATT_MAXD);
	if (t == 0)
		return QR_OK;
	k_attention_f32<<<dim3(cdiv(t, 4), nh), 128, 0, st>>>(out, q, k, v, t, s, nh, nkv, d, scale);
	QR_CKL("attention_f32");
	return QR_OK;
}

// ---- host entry (verification) ----

extern "C" int qr_attention_forward(float *out, const float *q, const float *k, const float *v, int t, int s, int nh,
                                    int nkv, int d, float scale) {
	QR_TRY(qr_require());
	QR_ARG(t >= 0 && s >= t && nh > 0 && nkv > 0 && d > 0, "qr_attention_forward: bad dims");
	const size_t nq = (size_t)t * nh * d, nk = (size_t)s * nkv * d;
	DevBuf dq, dk, dv, dout;
	QR_TRY(upload(dq, q, nq));
	QR_TRY(upload(dk, k, nk));
	QR_TRY(upload(dv, v, nk));
	QR_TRY(dout.alloc(nq * 4));
	QR_TRY(qr_fill_nan(dout.p, nq * 4, g_qr.stream));
	QR_TRY(launch_attention(dout.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>(), t, s, nh, nkv, d, scale,
	                        g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(out, dout, nq);
}

// The attention checks' inputs on the device as the model holds them: q, k
// and v rounded to bf16, and the gate of each of the `rows` (token, head)
// rows in the second half of a 512-wide q_proj row.
int upload_attn_inputs(DevBuf &bq, DevBuf &bk, DevBuf &bv, DevBuf &bg, const float *q, size_t nq, const float *k,
                       const float *v, size_t nk, const float *gate, size_t rows) {
	cudaStream_t st = g_qr.stream;
	std::vector<float> g2(rows * 512, 0.0f);
	for (size_t r = 0; r < rows; r++)
		for (int d = 0; d < 256; d++)
			g2[r * 512 + 256 + d] = gate[r * 256 + d];
	const float *src[4] = {q, k, v, g2.data()};
	const size_t n[4] = {nq, nk, nk, g2.size()};
	DevBuf *dst[4] = {&bq, &bk, &bv, &bg};
	for (int i = 0; i < 4; i++) {
		DevBuf f;
		QR_TRY(upload(f, src[i], n[i]));
		QR_TRY(dst[i]->alloc(n[i] * 2));
		QR_TRY(qr_convert_f32_bf16(dst[i]->as<bf16_t>(), f.as<float>(), n[i], st));
		QR_CK(cudaStreamSynchronize(st)); // before f is freed
	}
	return QR_OK;
}

// The decode kernels on host data (their check against the CPU's
// attention): q [nh, 256], k and v [cap, nkv, 256] of which the first s
// rows are the keys, gate [nh, 256]; out [nh, 256] = attention · σ(gate).
// Inputs are rounded to bf16 as the model holds them; out is the bf16 result.
extern "C" int qr_attention_decode(float *out, const float *q, const float *k, const float *v, const float *gate,
                                   int s, int cap, int nh, int nkv) {
	QR_TRY(qr_require());
	QR_ARG(out && q && k && v && gate && s >= 1 && s <= cap && nh > 0 && nkv > 0 && nh % nkv == 0,
	       "qr_attention_decode: bad arguments (s=%d cap=%d nh=%d nkv=%d)", s, cap, nh, nkv);
	cudaStream_t st = g_qr.stream;
	const size_t nq = (size_t)nh * 256, nk = (size_t)cap * nkv * 256;
	DevBuf bq, bk, bv, bg, by, fy, part, pos;
	QR_TRY(upload_attn_inputs(bq, bk, bv, bg, q, nq, k, v, nk, gate, nh));
	const int p = s - 1;
	QR_TRY(upload(pos, &p, 1));
	QR_TRY(part.alloc(attn_decode_part_bytes(nh, cap)));
	QR_TRY(qr_fill_nan(part.p, attn_decode_part_bytes(nh, cap), st)); // a split the combine reads unwritten shows
	QR_TRY(by.alloc(nq * 2));
	QR_TRY(qr_fill_nan(by.p, nq * 2, st));
	QR_TRY(launch_attn_decode(by.as<bf16_t>(), part.as<float>(), bq.as<bf16_t>(), bk.as<bf16_t>(), bv.as<bf16_t>(),
	                          bg.as<bf16_t>(), nh, nkv, 256, cap, 1.0f / 16.0f, pos.as<int>(), st));
	QR_TRY(fy.alloc(nq * 4));
	QR_TRY(qr_convert_bf16_f32(fy.as<float>(), by.as<bf16_t>(), nq, st));
	QR_CK(cudaStreamSynchronize(st));
	return download(out, fy, nq);
}
