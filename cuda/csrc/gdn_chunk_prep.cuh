// gdn_chunk_prep.cuh: the per-chunk, state-independent half of the chunked gated
// delta rule (docs/spec.md §4.1 steps 2-4), shared by the fp32 and the tensor-core
// paths. One block per (chunk, value head) computes, in fp32:
//
//   gam[r]   = inclusive cumsum of g over the chunk (padded rows add 0)
//   A[r][s]  = beta_r (k_r . k_s) exp(gam_r - gam_s), s < r  (else 0)
//   P[r][s]  = (q_r . k_s) exp(gam_r - gam_s),        s <= r (else 0)
//   M        = (I + A)^-1,  Mb = M diag(beta)
//
// and stores P, Mb (bf16 or fp32) and gam for the sequential scan. The names
// are layers/gateddelta/doc.go's (γ = gam, M, P, R, Δ, K̃). The scan forms
// the chunk's deltas as Δ = Mb Y with Y = V - diag(e^gam) K S: doc.go's
// Δ = M R regrouped, since R = V_β - diag(β e^γ) K S = diag(beta) Y, so
// M R = (M diag(beta)) Y and beta is folded into Mb once per chunk. With
// these the scan needs only (docs/spec.md §4.1 steps 3-5, W and U never
// materialised):
//   Y = V - diag(e^gam) K S,  Δ = Mb Y,  O = diag(e^gam) Q S + P Δ,
//   S = e^gam_C S + K̃^T Δ,  K̃ = diag(e^(gam_C - gam)) K.
#pragma once

#include "common.cuh"

#define GDN_C 64 // chunk length

// Scratch layout for nv heads and nc chunks with element type of size es.
struct GdnScratch {
	char *P, *Mb;
	float *gam;
	__host__ __device__ static GdnScratch at(void *base, int nv, int nc, size_t es) {
		GdnScratch s;
		s.P = (char *)base;
		s.Mb = s.P + (size_t)nv * nc * GDN_C * GDN_C * es;
		s.gam = (float *)(s.Mb + (size_t)nv * nc * GDN_C * GDN_C * es);
		return s;
	}
};

// M = (I + A)^-1 for a 64x64 strictly-lower A (both ld-strided, fp32, shared
// memory), by 16x16 blocks: diagonal blocks by forward substitution, then the
// off-diagonal blocks one block-diagonal at a time:
//   X_ij = -X_ii * sum_{k=j}^{i-1} A_ik X_kj.
// tmp holds 3*256 floats. All threads of the block must call it.
__device__ inline void solve_unit_lower64(float *M, const float *A, int ld, float *tmp) {
	const int tid = threadIdx.x, nt = blockDim.x;
	for (int i = tid; i < GDN_C * GDN_C; i += nt)
		M[(i >> 6) * ld + (i & 63)] = 0.0f;
	__syncthreads();
	if (tid < GDN_C) {
		// Column col of its 16x16 diagonal block, kept in registers so each
		// row needs only the A loads (no shared-memory round trip per step).
		const int base = tid & ~15, m = tid & 15, col = tid;
		float x[16];
#pragma unroll
		for (int i = 0; i < 16; i++) {
			float s = 0.0f;
#pragma unroll
			for (int j = 0; j < i; j++)
				if (j >= m)
					s = fmaf(A[(base + i) * ld + base + j], x[j], s);
			x[i] = i < m ? 0.0f : (i == m ? 1.0f : -s);
		}
#pragma unroll
		for (int i = 0; i < 16; i++)
			M[(base + i) * ld + col] = x[i];
	}
	__syncthreads();
	for (int d = 1; d < 4; d++) {
		const int ne = (4 - d) * 256;
		for (int e = tid; e < ne; e += nt) {
			const int p = e >> 8, r = (e >> 4) & 15, c = e & 15;
			const int i = p + d, j = p;
			float s = 0.0f;
			for (int kb = j; kb < i; kb++)
				for (int q = 0; q < 16; q++)
					s = fmaf(A[(16 * i + r) * ld + 16 * kb + q], M[(16 * kb + q) * ld + 16 * j + c], s);
			tmp[e] = s;
		}
		__syncthreads();
		for (int e = tid; e < ne; e += nt) {
			const int p = e >> 8, r = (e >> 4) & 15, c = e & 15;
			const int i = p + d, j = p;
			float s = 0.0f;
			for (int q = 0; q < 16; q++)
				s = fmaf(M[(16 * i + r) * ld + 16 * i + q], tmp[p * 256 + q * 16 + c], s);
			M[(16 * i + r) * ld + 16 * j + c] = -s;
		}
		__syncthreads();
	}
}

// Load g and beta of chunk n for value head h, cumsum g. Threads < 64 load;
// thread 0 scans. Ends with a barrier.
__device__ inline void load_gates(float *gam, float *bet, const float *g, const float *beta, int T, int NV, int n,
                                  int h) {
	const int tid = threadIdx.x;
	if (tid < GDN_C) {
		const int t = n * GDN_C + tid;
		gam[tid] = t < T ? g[(size_t)t * NV + h] : 0.0f;
		bet[tid] = t < T ? beta[(size_t)t * NV + h] : 0.0f;
	}
	__syncthreads();
	if (tid < 32) { // inclusive scan of 64 values, two per lane
		const float a = gam[2 * tid], b = gam[2 * tid + 1];
		float s = a + b;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			const float u = __shfl_up_sync(0xffffffffu, s, o);
			if (tid >= o)
				s += u;
		}
		gam[2 * tid] = s - b;
		gam[2 * tid + 1] = s;
	}
	__syncthreads();
}

// From raw dot products KK, QK (fp32, ld) build P and Mb and store them with
// gam to the scratch of (h, n). KK is overwritten by A; M and tmp are scratch.
template <typename TS>
__device__ inline void prep_finish(float *KK, float *QK, float *M, float *tmp, int ld, const float *gam,
                                   const float *bet, TS *Pg, TS *Mbg, float *gamg) {
	const int tid = threadIdx.x, nt = blockDim.x;
	for (int i = tid; i < GDN_C * GDN_C; i += nt) {
		const int r = i >> 6, s = i & 63;
		float a = 0.0f, p = 0.0f;
		if (s <= r) {
			const float dec = expf(gam[r] - gam[s]);
			p = QK[r * ld + s] * dec;
			if (s < r)
				a = bet[r] * KK[r * ld + s] * dec;
		}
		KK[r * ld + s] = a;
		stf(Pg + i, p);
	}
	__syncthreads();
	solve_unit_lower64(M, KK, ld, tmp);
	for (int i = tid; i < GDN_C * GDN_C; i += nt) {
		const int r = i >> 6, s = i & 63;
		stf(Mbg + i, M[r * ld + s] * bet[s]);
	}
	if (tid < GDN_C)
		gamg[tid] = gam[tid];
}

// fp32 prep: q, k fp32 with any dk (dynamic shared memory). Block 256.
// smem: Ks, Qs [64][dk+1]; KK, QK, M [64][65]; tmp 768; gam, bet 64.
__global__ void __launch_bounds__(256) k_gdn_prep_f32(const float *__restrict__ q, int ldq,
                                                      const float *__restrict__ k, int ldk, const float *g,
                                                      const float *beta, int T, int NK, int NV, int DK,
                                                      void *scratch) {
	extern __shared__ __align__(16) unsigned char qr_smem[];
	float *sm = (float *)qr_smem;
	const int n = blockIdx.x, h = blockIdx.y, nc = gridDim.x;
	const int hk = h / (NV / NK);
	const int ldk_s = DK + 1, ld = GDN_C + 1;
	float *Ks = sm, *Qs = Ks + GDN_C * ldk_s;
	float *KK = Qs + GDN_C * ldk_s, *QK = KK + GDN_C * ld, *M = QK + GDN_C * ld;
	float *tmp = M + GDN_C * ld, *gam = tmp + 768, *bet = gam + GDN_C;
	const int tid = threadIdx.x, nt = blockDim.x;
	for (int i = tid; i < GDN_C * DK; i += nt) {
		const int r = i / DK, c = i % DK, t = n * GDN_C + r;
		Ks[r * ldk_s + c] = t < T ? k[(size_t)t * ldk + hk * DK + c] : 0.0f;
		Qs[r * ldk_s + c] = t < T ? q[(size_t)t * ldq + hk * DK + c] : 0.0f;
	}
	load_gates(gam, bet, g, beta, T, NV, n, h);
	for (int i = tid; i < GDN_C * GDN_C; i += nt) {
		const int r = i >> 6, s = i & 63;
		float kk = 0.0f, qk = 0.0f;
		if (s <= r) {
			for (int c = 0; c < DK; c++) {
				kk = fmaf(Ks[r * ldk_s + c], Ks[s * ldk_s + c], kk);
				qk = fmaf(Qs[r * ldk_s + c], Ks[s * ldk_s + c], qk);
			}
		}
		KK[r * ld + s] = kk;
		QK[r * ld + s] = qk;
	}
	__syncthreads();
	GdnScratch S = GdnScratch::at(scratch, NV, nc, sizeof(float));
	const size_t off = ((size_t)h * nc + n) * GDN_C * GDN_C;
	prep_finish<float>(KK, QK, M, tmp, ld, gam, bet, (float *)S.P + off, (float *)S.Mb + off,
	                   S.gam + ((size_t)h * nc + n) * GDN_C);
}

// Tensor-core prep: q, k bf16 with dk = 128. Block 128 (4 warps, warp w owns
// rows 16w..16w+15 of K K^T and Q K^T). P goes to memory straight from the
// Q K^T fragments and A (from K K^T) into shared memory for the solve.
// smem: Ks, Qs bf16 [64][136], reused as M after the products; A [64][65];
// tmp 768; gam, bet 64 each (55 KB: four blocks per SM).
#define PREP_LDS 136
#define BF16_PREP_SMEM (2 * GDN_C * PREP_LDS * 2 + GDN_C * 65 * 4 + 768 * 4 + 128 * 4)
__global__ void __launch_bounds__(128) k_gdn_prep_bf16(const bf16_t *__restrict__ q, int ldq,
                                                       const bf16_t *__restrict__ k, int ldk, const float *g,
                                                       const float *beta, int T, int NK, int NV, void *scratch) {
	extern __shared__ __align__(16) unsigned char qr_smem[];
	unsigned char *smraw = qr_smem;
	const int n = blockIdx.x, h = blockIdx.y, nc = gridDim.x;
	const int hk = h / (NV / NK);
	const int ld = GDN_C + 1;
	bf16_t *Ks = (bf16_t *)smraw, *Qs = Ks + GDN_C * PREP_LDS;
	float *M = (float *)smraw; // aliases Ks/Qs once the products are done
	float *A = (float *)(smraw + 2 * GDN_C * PREP_LDS * sizeof(bf16_t));
	float *tmp = A + GDN_C * ld, *gam = tmp + 768, *bet = gam + GDN_C;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
#pragma unroll
	for (int it = 0; it < GDN_C * 16 / 128; it++) {
		const int r = (tid >> 4) + 8 * it, c8 = (tid & 15) * 8, t = n * GDN_C + r;
		uint4 kv = make_uint4(0, 0, 0, 0), qv = kv;
		if (t < T) {
			kv = *(const uint4 *)(k + (size_t)t * ldk + hk * 128 + c8);
			qv = *(const uint4 *)(q + (size_t)t * ldq + hk * 128 + c8);
		}
		*(uint4 *)(Ks + r * PREP_LDS + c8) = kv;
		*(uint4 *)(Qs + r * PREP_LDS + c8) = qv;
	}
	load_gates(gam, bet, g, beta, T, NV, n, h); // includes barriers
	float kk[8][4], qk[8][4];
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			kk[j][e] = qk[j][e] = 0.0f;
#pragma unroll
	for (int kc = 0; kc < 8; kc++) {
		unsigned ak[4], aq[4];
		lda_frag(ak, Ks + 16 * w * PREP_LDS + 16 * kc, PREP_LDS, lane);
		lda_frag(aq, Qs + 16 * w * PREP_LDS + 16 * kc, PREP_LDS, lane);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			unsigned b[2];
			ldb_frag(b, Ks + 8 * j * PREP_LDS + 16 * kc, PREP_LDS, lane);
			mma_bf16(kk[j], ak, b);
			mma_bf16(qk[j], aq, b);
		}
	}
	GdnScratch S = GdnScratch::at(scratch, NV, nc, sizeof(bf16_t));
	const size_t off = ((size_t)h * nc + n) * GDN_C * GDN_C;
	bf16_t *Pg = (bf16_t *)S.P + off;
	const int gq = lane >> 2, cq = lane & 3;
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const int r = 16 * w + gq + 8 * hh;
		const float gr = gam[r], br = bet[r];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			float p[2];
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int s = 8 * j + 2 * cq + e;
				const float dec = s <= r ? __expf(gr - gam[s]) : 0.0f;
				p[e] = qk[j][2 * hh + e] * dec;
				A[r * ld + s] = s < r ? br * kk[j][2 * hh + e] * dec : 0.0f;
			}
			*(unsigned *)(Pg + r * GDN_C + 8 * j + 2 * cq) = pack_bf2(p[0], p[1]);
		}
	}
	__syncthreads(); // Ks/Qs are dead from here; M reuses them
	solve_unit_lower64(M, A, ld, tmp);
	bf16_t *Mbg = (bf16_t *)S.Mb + off;
#pragma unroll 4
	for (int i = tid; i < GDN_C * GDN_C / 2; i += 128) {
		const int r = i >> 5, s = (i & 31) * 2;
		*(unsigned *)(Mbg + r * GDN_C + s) = pack_bf2(M[r * ld + s] * bet[s], M[r * ld + s + 1] * bet[s + 1]);
	}
	if (tid < GDN_C)
		S.gam[((size_t)h * nc + n) * GDN_C + tid] = gam[tid];
}
