// moe_route.cu: the MoE router on the device (moe.cu runs the rest of the
// block): p = softmax(x W_routerᵀ) in fp32 over the E experts, the k
// largest with exact ties to the lower expert index (as torch.topk on CUDA
// keeps them; the CPU backends follow torch on the CPU, layers/moe/topk.go),
// and w ← w / Σw when norm_topk_prob. qr_moe_route is its host-API check.
#include <math.h>

#include "model.cuh"

// NaN counts as the largest value (torch.topk's comparator); among equals
// the lower index wins.
__device__ __forceinline__ bool route_better(float v, int i, float bv, int bi) {
	const bool vn = v != v, bn = bv != bv;
	if (vn != bn)
		return vn;
	if (!vn && v != bv)
		return v > bv;
	return i < bi;
}

// One warp per token (8 per block): p = softmax(logits[t, 0:E]) in fp32,
// its k largest in descending order, renormalised when norm. ids/w [T, k];
// idf (may be null) gets the ids as floats for tracing. Warp shuffles
// only: each of the k rounds is a warp argmax over the experts not yet
// taken. PER > 0: each lane keeps its PER probabilities (experts lane,
// lane + 32, …; E <= 32·PER) and their taken bits in registers; PER = 0
// recomputes them each round and keeps the bits in shared memory (any E).
template <int PER>
__global__ void __launch_bounds__(256) k_moe_route(const float *__restrict__ logits, int ld, int T, int E, int k,
                                                   int norm, int32_t *__restrict__ ids, float *__restrict__ w,
                                                   float *__restrict__ idf) {
	__shared__ unsigned taken_all[PER ? 1 : 8][PER ? 1 : MOE_MAX_EXPERTS / 32];
	pdl_trigger();
	pdl_wait(); // the logits are the kernel before's output
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = blockIdx.x * 8 + warp;
	if (t >= T)
		return;
	unsigned *taken = taken_all[PER ? 0 : warp];
	const float *l = logits + (size_t)t * ld;
	float m = -INFINITY;
	for (int i = lane; i < E; i += 32)
		m = fmaxf(m, l[i]);
	if (!PER)
		for (int q = lane; q < (E + 31) / 32; q += 32)
			taken[q] = 0;
	m = warp_max(m);
	float pv[PER ? PER : 1];
	unsigned mask = 0; // PER > 0: bit q = expert lane + 32q is taken (or absent)
	float s = 0;
	if (PER) {
#pragma unroll
		for (int q = 0; q < (PER ? PER : 1); q++) {
			const int i = lane + 32 * q;
			pv[q] = i < E ? expf(l[i] - m) : 0.0f;
			if (i < E)
				s += pv[q];
			else
				mask |= 1u << q;
		}
	} else {
		for (int i = lane; i < E; i += 32)
			s += expf(l[i] - m);
	}
	s = warp_sum(s);
	__syncwarp();
	float w0 = 0, w1 = 0; // lane holds the choices of rounds lane (w0, i0) and lane + 32 (w1, i1)
	int i0 = 0, i1 = 0;
	for (int j = 0; j < k; j++) {
		float bv = -INFINITY;
		int bi = 0x7fffffff;
		if (PER) {
#pragma unroll
			for (int q = 0; q < (PER ? PER : 1); q++) {
				const float p = pv[q] / s;
				if (!(mask >> q & 1) && route_better(p, lane + 32 * q, bv, bi))
					bv = p, bi = lane + 32 * q;
			}
		} else {
			for (int i = lane; i < E; i += 32) {
				if (taken[i >> 5] >> (i & 31) & 1)
					continue;
				const float p = expf(l[i] - m) / s;
				if (route_better(p, i, bv, bi))
					bv = p, bi = i;
			}
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
			if (route_better(ov, oi, bv, bi))
				bv = ov, bi = oi;
		}
		if (PER) {
			if (bi < 0 || bi >= E) { // every value compared false: the first free expert
				for (bi = 0; bi < E; bi++) {
					const unsigned mq = __shfl_sync(0xffffffffu, mask, bi & 31);
					if (!(mq >> (bi >> 5) & 1))
						break;
				}
			}
			if (lane == (bi & 31))
				mask |= 1u << (bi >> 5);
		} else {
			if (bi < 0 || bi >= E)
				for (bi = 0; taken[bi >> 5] >> (bi & 31) & 1; bi++) {
				}
			__syncwarp();
			if (lane == 0)
				taken[bi >> 5] |= 1u << (bi & 31);
			__syncwarp();
		}
		if (lane == (j & 31)) {
			if (j < 32)
				w0 = bv, i0 = bi;
			else
				w1 = bv, i1 = bi;
		}
	}
	float sum = 0;
	for (int j = 0; j < k; j++) // in round order, as a sequential sum
		sum += __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j & 31);
	const size_t o = (size_t)t * k;
	if (lane < k) {
		ids[o + lane] = i0;
		w[o + lane] = norm ? w0 / sum : w0;
		if (idf)
			idf[o + lane] = (float)i0;
	}
	if (lane + 32 < k) {
		ids[o + lane + 32] = i1;
		w[o + lane + 32] = norm ? w1 / sum : w1;
		if (idf)
			idf[o + lane + 32] = (float)i1;
	}
}

// The router for T tokens: the register form where E fits (up to 1024
// experts), else the general one.
int launch_moe_route(const float *logits, int ld, int T, int E, int k, int norm, int32_t *ids, float *w, float *idf,
                        cudaStream_t st) {
	const unsigned g = cdiv(T, 8);
	if (E <= 32)
		return launch_pdl(k_moe_route<1>, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
	if (E <= 128)
		return launch_pdl(k_moe_route<4>, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
	if (E <= 256)
		return launch_pdl(k_moe_route<8>, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
	if (E <= 512)
		return launch_pdl(k_moe_route<16>, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
	if (E <= 1024)
		return launch_pdl(k_moe_route<32>, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
	return launch_pdl(k_moe_route<0>, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
}

// ---- host API ----

extern "C" int qr_moe_route(int32_t *ids, float *w, const float *logits, int t, int e, int k, int norm) {
	QR_TRY(qr_require());
	QR_ARG(ids && w && logits && t > 0 && e > 0 && e <= MOE_MAX_EXPERTS && k > 0 && k <= e && k <= MOE_MAX_TOPK,
	       "qr_moe_route: bad arguments (t=%d e=%d k=%d)", t, e, k);
	cudaStream_t st = g_qr.stream;
	DevBuf dl, di, dw;
	QR_TRY(upload(dl, logits, (size_t)t * e));
	QR_TRY(di.alloc((size_t)t * k * 4));
	QR_TRY(dw.alloc((size_t)t * k * 4));
	QR_TRY(launch_moe_route(dl.as<float>(), e, t, e, k, norm, di.as<int32_t>(), dw.as<float>(), nullptr, st));
	QR_CK(cudaStreamSynchronize(st));
	QR_TRY(download(ids, di, (size_t)t * k));
	return download(w, dw, (size_t)t * k);
}
