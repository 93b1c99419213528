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

// The tail both forms share: lane j < 32 holds round j's choice in (w0, i0),
// lane j - 32 round j's in (w1, i1); the weights renormalised by their sum
// in round order (a sequential sum) when norm.
__device__ __forceinline__ void route_store(int lane, int k, int norm, float w0, int i0, float w1, int i1, size_t o,
                                            int32_t *__restrict__ ids, float *__restrict__ w,
                                            float *__restrict__ idf) {
	float sum = 0;
	for (int j = 0; j < k; j++)
		sum += __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j & 31);
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

// A candidate as one 64-bit key that orders as route_better does: the
// probability's bits above (p >= 0 or NaN, so the bits order as the value;
// NaN above every number), the index's complement below (among equals the
// lower index is the larger key). 0 is below every candidate: none left.
__device__ __forceinline__ unsigned long long route_key(float p, int i) {
	const unsigned hi = p != p ? 0xffffffffu : __float_as_uint(p);
	return (unsigned long long)hi << 32 | (unsigned)(0x7fffffff - i);
}

// One warp per token (8 per block), E <= 32·PER: p = softmax(logits[t,
// 0:E]) in fp32, its k largest in descending order, renormalised when norm.
// ids/w [T, k]; idf (may be null) gets the ids as floats for tracing. Lane l
// keeps the keys of experts l, l + 32, … in registers; each of the k rounds
// is a local maximum and a five-step warp maximum of the keys, and the
// winner's lane clears its key. The probabilities are divided once, not
// once a round (this kernel sits between the router GEMV and the experts'
// GEMVs in every decode layer: a round used to cost PER divisions and a
// two-value shuffle chain).
template <int PER>
__global__ void __launch_bounds__(256) k_moe_route(const float *__restrict__ logits, int ld, int T, int E, int k,
                                                   int norm, int32_t *__restrict__ ids, float *__restrict__ w,
                                                   float *__restrict__ idf) {
	pdl_trigger();
	pdl_wait(); // the logits are the kernel before's output
	const int lane = threadIdx.x & 31, t = blockIdx.x * 8 + (threadIdx.x >> 5);
	if (t >= T)
		return;
	const float *l = logits + (size_t)t * ld;
	float lv[PER];
	float m = -INFINITY;
#pragma unroll
	for (int q = 0; q < PER; q++) {
		const int i = lane + 32 * q;
		lv[q] = i < E ? l[i] : -INFINITY;
		if (i < E)
			m = fmaxf(m, lv[q]);
	}
	m = warp_max(m);
	float s = 0;
#pragma unroll
	for (int q = 0; q < PER; q++) {
		lv[q] = lane + 32 * q < E ? expf(lv[q] - m) : 0.0f;
		s += lv[q];
	}
	s = warp_sum(s);
	unsigned long long key[PER];
#pragma unroll
	for (int q = 0; q < PER; q++)
		key[q] = lane + 32 * q < E ? route_key(lv[q] / s, lane + 32 * q) : 0ull;
	float w0 = 0, w1 = 0;
	int i0 = 0, i1 = 0;
	for (int j = 0; j < k; j++) {
		unsigned long long best = key[0];
#pragma unroll
		for (int q = 1; q < PER; q++)
			best = key[q] > best ? key[q] : best;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
			best = other > best ? other : best;
		}
		const int bi = 0x7fffffff - (int)(unsigned)best;
		const int mine = lane == (bi & 31) ? bi >> 5 : -1; // a select per key: no indexed store
#pragma unroll
		for (int q = 0; q < PER; q++)
			key[q] = q == mine ? 0ull : key[q];
		if (lane == (j & 31)) {
			// The probability itself: its bits, or the NaN it was.
			const unsigned hi = (unsigned)(best >> 32);
			const float bv = hi == 0xffffffffu ? NAN : __uint_as_float(hi);
			if (j < 32)
				w0 = bv, i0 = bi;
			else
				w1 = bv, i1 = bi;
		}
	}
	route_store(lane, k, norm, w0, i0, w1, i1, (size_t)t * k, ids, w, idf);
}

// The same for any E (up to MOE_MAX_EXPERTS): one warp per token, the
// probabilities recomputed each round and the taken bits in shared memory.
__global__ void __launch_bounds__(256) k_moe_route_any(const float *__restrict__ logits, int ld, int T, int E, int k,
                                                       int norm, int32_t *__restrict__ ids, float *__restrict__ w,
                                                       float *__restrict__ idf) {
	__shared__ unsigned taken_all[8][MOE_MAX_EXPERTS / 32];
	pdl_trigger();
	pdl_wait(); // the logits are the kernel before's output
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = blockIdx.x * 8 + warp;
	if (t >= T)
		return;
	unsigned *taken = taken_all[warp];
	const float *l = logits + (size_t)t * ld;
	float m = -INFINITY;
	for (int i = lane; i < E; i += 32)
		m = fmaxf(m, l[i]);
	for (int q = lane; q < (E + 31) / 32; q += 32)
		taken[q] = 0;
	m = warp_max(m);
	float s = 0;
	for (int i = lane; i < E; i += 32)
		s += expf(l[i] - m);
	s = warp_sum(s);
	__syncwarp();
	float w0 = 0, w1 = 0;
	int i0 = 0, i1 = 0;
	for (int j = 0; j < k; j++) {
		float bv = -INFINITY;
		int bi = 0x7fffffff;
		for (int i = lane; i < E; i += 32) {
			if (taken[i >> 5] >> (i & 31) & 1)
				continue;
			const float p = expf(l[i] - m) / s;
			if (route_better(p, i, bv, bi))
				bv = p, bi = i;
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
			if (route_better(ov, oi, bv, bi))
				bv = ov, bi = oi;
		}
		if (bi < 0 || bi >= E) // every value compared false: the first free expert
			for (bi = 0; taken[bi >> 5] >> (bi & 31) & 1; bi++) {
			}
		__syncwarp();
		if (lane == 0)
			taken[bi >> 5] |= 1u << (bi & 31);
		__syncwarp();
		if (lane == (j & 31)) {
			if (j < 32)
				w0 = bv, i0 = bi;
			else
				w1 = bv, i1 = bi;
		}
	}
	route_store(lane, k, norm, w0, i0, w1, i1, (size_t)t * k, ids, w, idf);
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
	return launch_pdl(k_moe_route_any, dim3(g), dim3(256), 0, st, logits, ld, T, E, k, norm, ids, w, idf);
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
