// flash_common.cuh: the per-thread pieces that both prefill flash attention
// kernels share (flash_attn.cu on mma.sync, flash_attn_wg.cu on wgmma):
// one key tile of the online softmax in base 2, O's rescale and the gated
// epilogue. Both kernels hold a thread's scores and outputs in the same
// fragment layout: element 4n + e is row p0 (e < 2) or p1 = p0 + 8, column
// 8n + 2c + (e & 1), with c = lane % 4.
#pragma once

#include <math.h>

#include "common.cuh"

// 2^x by the special-function unit (relative error about 2^-22; -∞ → 0).
__device__ __forceinline__ float fast_exp2(float x) {
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

// O [*, D] of a thread's rows times c0 (row p0) and c1 (row p1), skipped
// when every row of the warp keeps its scale (most tiles, once the maxima
// settle).
template <int D>
__device__ __forceinline__ void fa_rescale(float *o, float c0, float c1) {
	if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
		for (int n = 0; n < D / 8; n++) {
			o[4 * n] *= c0;
			o[4 * n + 1] *= c0;
			o[4 * n + 2] *= c1;
			o[4 * n + 3] *= c1;
		}
	}
}

// One BN-key tile at key kpos: the causal mask where the tile reaches past
// the warp's first row wfirst, the new row maxima m0, m1 (raw scores: the
// scale is positive, so the max commutes with it and folds into one FMA per
// score; a quad's four lanes share a row), l0, l1 rescaled and summed, P as
// bf16 A fragments (pa[k16 step][4]), and O's scale per row in c0, c1.
// Key 0 is visible to every row and comes first, so a row's max is finite
// from the first tile on; a row fully masked in a later tile keeps its max
// and gets P = 0. With D > 0, O [*, D] (not in use by the tensor cores) is
// rescaled here, before P is formed; with D = 0 the caller rescales it.
template <int BN, int D>
__device__ __forceinline__ void fa_softmax_tile(float *s, int kpos, int wfirst, int p0, int p1, int c,
                                                float scale_log2, float &m0, float &m1, float &l0, float &l1,
                                                float &c0, float &c1, unsigned (*pa)[4], float *o) {
	if (kpos + BN - 1 > wfirst) {
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int key = kpos + 8 * n + 2 * c + (e & 1);
				if (key > (e < 2 ? p0 : p1))
					s[4 * n + e] = -INFINITY;
			}
	}
	float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
	for (int n = 0; n < BN / 8; n++) {
		mx0 = fmaxf(mx0, fmaxf(s[4 * n], s[4 * n + 1]));
		mx1 = fmaxf(mx1, fmaxf(s[4 * n + 2], s[4 * n + 3]));
	}
	mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
	mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
	mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
	mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
	const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
	c0 = fast_exp2((m0 - n0) * scale_log2);
	c1 = fast_exp2((m1 - n1) * scale_log2);
	const float ns0 = n0 * scale_log2, ns1 = n1 * scale_log2;
	m0 = n0;
	m1 = n1;
	l0 *= c0;
	l1 *= c1;
	if constexpr (D > 0)
		fa_rescale<D>(o, c0, c1);
#pragma unroll
	for (int n = 0; n < BN / 8; n++) {
		const float e0 = fast_exp2(fmaf(s[4 * n], scale_log2, -ns0));
		const float e1 = fast_exp2(fmaf(s[4 * n + 1], scale_log2, -ns0));
		const float e2 = fast_exp2(fmaf(s[4 * n + 2], scale_log2, -ns1));
		const float e3 = fast_exp2(fmaf(s[4 * n + 3], scale_log2, -ns1));
		l0 += e0 + e1;
		l1 += e2 + e3;
		// Score tile n → A fragment of the k16 step n/2.
		pa[n >> 1][(n & 1) * 2] = pack_bf2(e0, e1);
		pa[n >> 1][(n & 1) * 2 + 1] = pack_bf2(e2, e3);
	}
}

// y[r, h] = (O / l) ⊙ σ(gate[r, h]) in bf16 for the thread's rows r0 and
// r1 = r0 + 8 (those below T), y rows of nh·D; gate (t, h) at gate + t·ldg
// + h·2D (the q_proj layout).
template <int D>
__device__ __forceinline__ void fa_store_gated(bf16_t *y, const bf16_t *gate, int ldg, const float *o, float l0,
                                               float l1, int r0, int T, int h, int nh, int c) {
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	const float i0 = 1.0f / l0, i1 = 1.0f / l1;
	const int r1 = r0 + 8;
#pragma unroll
	for (int n = 0; n < D / 8; n++) {
		const int col = 8 * n + 2 * c;
		if (r0 < T) {
			const unsigned gw = *(const unsigned *)(gate + (size_t)r0 * ldg + (size_t)h * 2 * D + col);
			const float g0 = __uint_as_float(gw << 16), g1 = __uint_as_float(gw & 0xffff0000u);
			*(unsigned *)(y + ((size_t)r0 * nh + h) * D + col) =
			    pack_bf2(o[4 * n] * i0 / (1.0f + __expf(-g0)), o[4 * n + 1] * i0 / (1.0f + __expf(-g1)));
		}
		if (r1 < T) {
			const unsigned gw = *(const unsigned *)(gate + (size_t)r1 * ldg + (size_t)h * 2 * D + col);
			const float g0 = __uint_as_float(gw << 16), g1 = __uint_as_float(gw & 0xffff0000u);
			*(unsigned *)(y + ((size_t)r1 * nh + h) * D + col) =
			    pack_bf2(o[4 * n + 2] * i1 / (1.0f + __expf(-g0)), o[4 * n + 3] * i1 / (1.0f + __expf(-g1)));
		}
	}
}
