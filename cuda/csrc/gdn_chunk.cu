// gdn_chunk.cu: the gated delta rule core, chunked: the sequential scan
// (fp32 SIMT and bf16 tensor cores) after the per-chunk prep of
// gdn_chunk_prep.cuh (whose header states the names: P, Mb = M diag(β), Y,
// Δ, K̃), and the host entry point. The per-token recurrence and the fused
// decode step are gdn_recurrent.cu; the layer around them gdn_layer.cu(h).
#include "common.cuh"
#include "gdn_chunk_prep.cuh"
#include "internal.cuh"

// ---------------------------------------------------------------------------
// fp32 scan, SIMT: one block per (value head, 32 value columns); 256 threads.
// smem: S [dk][33]; Ks, Qs [64][dk+1]; P, Mb [64][65]; X (K S, then Y, then
// K̃-scaled Δ), QS, Dl (Δ) [64][33]; gam.
#define F32_VS 32
__global__ void __launch_bounds__(256) k_gdn_scan_f32(const float *__restrict__ q, int ldq,
                                                      const float *__restrict__ k, int ldk,
                                                      const float *__restrict__ v, int ldv, float *__restrict__ out,
                                                      int ldo, float *state, int T, int NK, int NV, int DK, int DV,
                                                      const void *scratch) {
	extern __shared__ __align__(16) unsigned char qr_smem[];
	float *sm = (float *)qr_smem;
	const int h = blockIdx.y, vb = blockIdx.x * F32_VS, hk = h / (NV / NK);
	const int nc = (T + GDN_C - 1) / GDN_C;
	const int lds = F32_VS + 1, ldk_s = DK + 1, ld = GDN_C + 1;
	float *S = sm, *Ks = S + DK * lds, *Qs = Ks + GDN_C * ldk_s, *Ps = Qs + GDN_C * ldk_s, *Mbs = Ps + GDN_C * ld;
	float *X = Mbs + GDN_C * ld, *QS = X + GDN_C * lds, *Dl = QS + GDN_C * lds, *gam = Dl + GDN_C * lds;
	const int tid = threadIdx.x, nt = blockDim.x;
	const int nv = min(F32_VS, DV - vb); // valid columns in this slice
	GdnScratch sc = GdnScratch::at((void *)scratch, NV, nc, sizeof(float));

	for (int i = tid; i < DK * F32_VS; i += nt) {
		const int r = i / F32_VS, c = i % F32_VS;
		S[r * lds + c] = c < nv ? state[((size_t)h * DK + r) * DV + vb + c] : 0.0f;
	}
	for (int n = 0; n < nc; n++) {
		const size_t off = ((size_t)h * nc + n) * GDN_C * GDN_C;
		for (int i = tid; i < GDN_C * DK; i += nt) {
			const int r = i / DK, c = i % DK, t = n * GDN_C + r;
			Ks[r * ldk_s + c] = t < T ? k[(size_t)t * ldk + hk * DK + c] : 0.0f;
			Qs[r * ldk_s + c] = t < T ? q[(size_t)t * ldq + hk * DK + c] : 0.0f;
		}
		for (int i = tid; i < GDN_C * GDN_C; i += nt) {
			Ps[(i >> 6) * ld + (i & 63)] = ((const float *)sc.P)[off + i];
			Mbs[(i >> 6) * ld + (i & 63)] = ((const float *)sc.Mb)[off + i];
		}
		if (tid < GDN_C)
			gam[tid] = sc.gam[((size_t)h * nc + n) * GDN_C + tid];
		__syncthreads();
		// X = K S, QS = Q S (state at chunk start).
		for (int i = tid; i < GDN_C * F32_VS; i += nt) {
			const int r = i / F32_VS, c = i % F32_VS;
			float x = 0.0f, z = 0.0f;
			for (int d = 0; d < DK; d++) {
				x = fmaf(Ks[r * ldk_s + d], S[d * lds + c], x);
				z = fmaf(Qs[r * ldk_s + d], S[d * lds + c], z);
			}
			const int t = n * GDN_C + r;
			const float vv = (t < T && c < nv) ? v[(size_t)t * ldv + h * DV + vb + c] : 0.0f;
			X[r * lds + c] = vv - expf(gam[r]) * x; // Y
			QS[r * lds + c] = expf(gam[r]) * z;
		}
		__syncthreads();
		// Δ = Mb Y (Mb lower triangular).
		for (int i = tid; i < GDN_C * F32_VS; i += nt) {
			const int r = i / F32_VS, c = i % F32_VS;
			float s = 0.0f;
			for (int j = 0; j <= r; j++)
				s = fmaf(Mbs[r * ld + j], X[j * lds + c], s);
			Dl[r * lds + c] = s;
		}
		__syncthreads();
		// O = e^gam Q S + P Δ; then X := e^(gam_C - gam) Δ.
		const float gC = gam[GDN_C - 1];
		for (int i = tid; i < GDN_C * F32_VS; i += nt) {
			const int r = i / F32_VS, c = i % F32_VS, t = n * GDN_C + r;
			float o = QS[r * lds + c];
			for (int j = 0; j <= r; j++)
				o = fmaf(Ps[r * ld + j], Dl[j * lds + c], o);
			if (t < T && c < nv)
				out[(size_t)t * ldo + h * DV + vb + c] = o;
			X[r * lds + c] = expf(gC - gam[r]) * Dl[r * lds + c];
		}
		__syncthreads();
		// S = e^gam_C S + K^T X.
		const float lam = expf(gC);
		for (int i = tid; i < DK * F32_VS; i += nt) {
			const int d = i / F32_VS, c = i % F32_VS;
			float s = lam * S[d * lds + c];
			for (int r = 0; r < GDN_C; r++)
				s = fmaf(Ks[r * ldk_s + d], X[r * lds + c], s);
			S[d * lds + c] = s;
		}
		__syncthreads();
	}
	for (int i = tid; i < DK * F32_VS; i += nt) {
		const int r = i / F32_VS, c = i % F32_VS;
		if (c < nv)
			state[((size_t)h * DK + r) * DV + vb + c] = S[r * lds + c];
	}
}

static size_t f32_prep_smem(int dk) { return (size_t)(2 * GDN_C * (dk + 1) + 3 * GDN_C * 65 + 768 + 128) * 4; }
static size_t f32_scan_smem(int dk) {
	return (size_t)(dk * 33 + 2 * GDN_C * (dk + 1) + 2 * GDN_C * 65 + 3 * GDN_C * 33 + GDN_C) * 4;
}

size_t gdn_scratch_bytes(int T, int NV, int f32) {
	const size_t nc = (size_t)(T + GDN_C - 1) / GDN_C;
	return (size_t)NV * nc * (2 * GDN_C * GDN_C * (f32 ? 4 : 2) + GDN_C * 4);
}

int qr_max_smem = 0; // opt-in shared memory per block (set by qr_gdn_init)

int gdn_chunk_f32(const GdnArgs &a, void *scratch, cudaStream_t st) {
	QR_ARG(a.NV % a.NK == 0 && a.DK > 0 && a.DV > 0, "gdn f32: bad heads");
	const size_t sp = f32_prep_smem(a.DK), ss = f32_scan_smem(a.DK);
	QR_ARG((int)sp <= qr_max_smem && (int)ss <= qr_max_smem,
	       "gdn f32 chunked: dk=%d needs %zu bytes of shared memory (limit %d); use the recurrent variant", a.DK,
	       ss, qr_max_smem);
	if (a.T == 0)
		return QR_OK;
	const int nc = (a.T + GDN_C - 1) / GDN_C;
	QR_CK(cudaFuncSetAttribute(k_gdn_prep_f32, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sp));
	QR_CK(cudaFuncSetAttribute(k_gdn_scan_f32, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss));
	k_gdn_prep_f32<<<dim3(nc, a.NV), 256, sp, st>>>((const float *)a.q, a.ldq, (const float *)a.k, a.ldk, a.g,
	                                                a.beta, a.T, a.NK, a.NV, a.DK, scratch);
	QR_CKL("gdn_prep_f32");
	k_gdn_scan_f32<<<dim3(cdiv(a.DV, F32_VS), a.NV), 256, ss, st>>>(
	    (const float *)a.q, a.ldq, (const float *)a.k, a.ldk, (const float *)a.v, a.ldv, (float *)a.out, a.ldo,
	    a.state, a.T, a.NK, a.NV, a.DK, a.DV, scratch);
	QR_CKL("gdn_scan_f32");
	return QR_OK;
}

// ---------------------------------------------------------------------------
// Tensor-core scan: one block per (value head, BV value columns), NW warps
// (the launch shape NW·100 + BV: 432, 832 or 864); dk = dv = 128. The fp32
// state S^T [BV][128] lives in mma accumulators (warp w owns dk columns
// [128/NW*w, +128/NW)); its bf16 copy Ss feeds the products. For the t × v
// products the warps are 4 row tiles × NW/4 column groups. Every shape sums
// in the same order, so all give the same bits. Inputs stream in by cp.async, each buffer reloaded
// for chunk n+1 as soon as chunk n is done with it (K double-buffered since
// it is used first and last). See the phase comments for the four cp.async
// groups; every wait is "all but the 3 newest groups".
#define LDK 136 // 128 + 8 bf16 of padding: conflict-free fragment loads
#define LDC 72  // 64 + 8
template <int BV> struct ScanSmem {
	static constexpr int LDV = BV + 8;
	static constexpr size_t Ks = 0;                                  // [2][64][LDK]
	static constexpr size_t Qs = Ks + 2 * GDN_C * LDK * 2;           // [64][LDK]
	static constexpr size_t Ps = Qs + GDN_C * LDK * 2;               // [64][LDC]
	static constexpr size_t Mbs = Ps + GDN_C * LDC * 2;               // [64][LDC]
	static constexpr size_t Vs = Mbs + GDN_C * LDC * 2;               // [64][LDV]
	static constexpr size_t Ss = Vs + GDN_C * LDV * 2;               // [BV][LDK]  S^T bf16
	static constexpr size_t Ys = Ss + BV * LDK * 2;                  // [BV][LDC]  Y^T
	static constexpr size_t Dls = Ys + BV * LDC * 2;                 // [BV][LDC]  Δ^T
	static constexpr size_t Dl2s = Dls + BV * LDC * 2;               // [BV][LDC]  (decayed Δ)^T
	static constexpr size_t gam = Dl2s + BV * LDC * 2;               // [2][64] f32
	static constexpr size_t bytes = gam + 2 * GDN_C * 4;
};

// The scan's loaders: every thread copies a strided share of 16-byte pieces
// with cp.async (rows past T are zero-filled with plain stores) and commits
// one group per call, also when there is nothing left to load, so the
// group arithmetic of the waits stays fixed.
template <int BV, int NW> struct ScanIO {
	const bf16_t *q;
	int ldq;
	const bf16_t *k;
	int ldk;
	const bf16_t *v;
	int ldv;
	const bf16_t *Pg, *Mbg;
	const float *gamg;
	int T, nc, hk, h, vb, tid;
	static constexpr int NT = NW * 32; // threads; fixed so the loops unroll

	__device__ __forceinline__ void rows128(bf16_t *dst, const bf16_t *src, int ld, int n) const {
		const bf16_t *base = src + hk * 128 + (tid & 15) * 8;
#pragma unroll
		for (int it = 0; it < GDN_C * 16 / NT; it++) {
			const int r = (tid >> 4) + it * (NT / 16), t = n * GDN_C + r;
			bf16_t *d = dst + r * LDK + (tid & 15) * 8;
			if (t < T)
				cp_async16(d, base + (size_t)t * ld);
			else
				*(uint4 *)d = make_uint4(0, 0, 0, 0);
		}
	}
	__device__ __forceinline__ void mat64(bf16_t *dst, const bf16_t *src) const {
#pragma unroll
		for (int it = 0; it < GDN_C * 8 / NT; it++) {
			const int r = (tid >> 3) + it * (NT / 8), c8 = (tid & 7) * 8;
			cp_async16(dst + r * LDC + c8, src + r * GDN_C + c8);
		}
	}
	// K rows -> Ks[n&1], gam -> gams[n&1]
	__device__ __forceinline__ void issue_K(bf16_t *Ks, float *gams, int n) const {
		if (n < nc) {
			rows128(Ks + (n & 1) * GDN_C * LDK, k, ldk, n);
			if (tid < 16)
				cp_async16(gams + (n & 1) * GDN_C + tid * 4, gamg + (size_t)n * GDN_C + tid * 4);
		}
		cp_async_commit();
	}
	__device__ __forceinline__ void issue_Q(bf16_t *Qs, int n) const {
		if (n < nc)
			rows128(Qs, q, ldq, n);
		cp_async_commit();
	}
	// Mb -> Mbs, the block's V columns -> Vs
	__device__ __forceinline__ void issue_MbV(bf16_t *Mbs, bf16_t *Vs, int n) const {
		if (n < nc) {
			mat64(Mbs, Mbg + (size_t)n * GDN_C * GDN_C);
			constexpr int PER = BV / 8, LDV = BV + 8;
#pragma unroll
			for (int it = 0; it < GDN_C * PER / NT; it++) {
				const int i = tid + it * NT;
				const int r = i / PER, c8 = (i % PER) * 8, t = n * GDN_C + r;
				if (t < T)
					cp_async16(Vs + r * LDV + c8, v + (size_t)t * ldv + h * 128 + vb + c8);
				else
					*(uint4 *)(Vs + r * LDV + c8) = make_uint4(0, 0, 0, 0);
			}
		}
		cp_async_commit();
	}
	__device__ __forceinline__ void issue_P(bf16_t *Ps, int n) const {
		if (n < nc)
			mat64(Ps, Pg + (size_t)n * GDN_C * GDN_C);
		cp_async_commit();
	}
};

// bf16 copy of the fp32 state accumulators, S^T [BV][LDK].
template <int MT, int NTS>
__device__ __forceinline__ void write_Ss(bf16_t *Ss, const float (&accS)[MT][NTS][4], int gq, int cq, int dk0) {
#pragma unroll
	for (int mi = 0; mi < MT; mi++)
#pragma unroll
		for (int j = 0; j < NTS; j++)
#pragma unroll
			for (int hh = 0; hh < 2; hh++) {
				const int vv = 16 * mi + gq + 8 * hh, d = dk0 + 8 * j + 2 * cq;
				*(unsigned *)(Ss + vv * LDK + d) = pack_bf2(accS[mi][j][2 * hh], accS[mi][j][2 * hh + 1]);
			}
}

template <int BV, int NW, typename Tout>
__global__ void __launch_bounds__(NW * 32) k_gdn_scan_bf16(const bf16_t *__restrict__ q, int ldq,
                                                         const bf16_t *__restrict__ k, int ldk,
                                                         const bf16_t *__restrict__ v, int ldv,
                                                         Tout *__restrict__ out, int ldo, float *state, int T,
                                                         int NK, int NV, const void *scratch) {
	typedef ScanSmem<BV> L;
	constexpr int LDV = L::LDV;
	constexpr int JT = BV / (2 * NW); // n-tiles (8 value columns) of a warp's t x v products
	constexpr int MT = BV / 16;       // m-tiles of S^T per warp
	constexpr int NTS = 16 / NW;      // n-tiles (8 dk columns) of S^T per warp
	constexpr int DKW = 128 / NW;     // dk columns per warp
	extern __shared__ __align__(16) unsigned char qr_smem[];
	unsigned char *sm = qr_smem;
	bf16_t *Ks = (bf16_t *)(sm + L::Ks), *Qs = (bf16_t *)(sm + L::Qs), *Ps = (bf16_t *)(sm + L::Ps);
	bf16_t *Mbs = (bf16_t *)(sm + L::Mbs), *Vs = (bf16_t *)(sm + L::Vs), *Ss = (bf16_t *)(sm + L::Ss);
	bf16_t *Ys = (bf16_t *)(sm + L::Ys), *Dls = (bf16_t *)(sm + L::Dls), *Dl2s = (bf16_t *)(sm + L::Dl2s);
	float *gams = (float *)(sm + L::gam);

	const int h = blockIdx.y, vb = blockIdx.x * BV, hk = h / (NV / NK);
	const int nc = (T + GDN_C - 1) / GDN_C;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int gq = lane >> 2, cq = lane & 3;
	const int rw = 16 * (w & 3), cg = 8 * JT * (w >> 2); // row tile and column group for the t x v products
	const int dk0 = DKW * w;
	GdnScratch sc = GdnScratch::at((void *)scratch, NV, nc, sizeof(bf16_t));
	const bf16_t *Pg = (const bf16_t *)sc.P + (size_t)h * nc * GDN_C * GDN_C;
	const bf16_t *Mbg = (const bf16_t *)sc.Mb + (size_t)h * nc * GDN_C * GDN_C;
	const float *gamg = sc.gam + (size_t)h * nc * GDN_C;

	ScanIO<BV, NW> io = {q, ldq, k, ldk, v, ldv, Pg, Mbg, gamg, T, nc, hk, h, vb, tid};

	// State: S^T fragment (mi, j, e) is v = 16mi + gq + 8(e>>1), dk = dk0 + 8j + 2cq + (e&1).
	float accS[MT][NTS][4];
#pragma unroll
	for (int mi = 0; mi < MT; mi++)
#pragma unroll
		for (int j = 0; j < NTS; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int vv = 16 * mi + gq + 8 * (e >> 1), d = dk0 + 8 * j + 2 * cq + (e & 1);
				accS[mi][j][e] = state[((size_t)h * 128 + d) * 128 + vb + vv];
			}
	write_Ss<MT, NTS>(Ss, accS, gq, cq, dk0);
	io.issue_K(Ks, gams, 0);
	io.issue_Q(Qs, 0);
	io.issue_MbV(Mbs, Vs, 0);
	io.issue_P(Ps, 0);

	for (int n = 0; n < nc; n++) {
		const int kb = n & 1;
		const bf16_t *Kc = Ks + kb * GDN_C * LDK;
		const float *gm = gams + kb * GDN_C;
		io.issue_K(Ks, gams, n + 1);
		cp_async_wait<3>(); // K(n), Q(n)
		__syncthreads();

		// Phase 1: X = K S and QS = Q S for rows rw.., columns cg.. (JT n-tiles).
		float accKS[JT][4], accQS[JT][4];
#pragma unroll
		for (int j = 0; j < JT; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				accKS[j][e] = accQS[j][e] = 0.0f;
#pragma unroll
		for (int kc = 0; kc < 8; kc++) {
			unsigned ak[4], aq[4];
			lda_frag(ak, Kc + rw * LDK + 16 * kc, LDK, lane);
			lda_frag(aq, Qs + rw * LDK + 16 * kc, LDK, lane);
#pragma unroll
			for (int j = 0; j < JT; j++) {
				unsigned b[2];
				ldb_frag(b, Ss + (cg + 8 * j) * LDK + 16 * kc, LDK, lane);
				mma_bf16(accKS[j], ak, b);
				mma_bf16(accQS[j], aq, b);
			}
		}
		__syncthreads(); // everyone is done with Qs
		io.issue_Q(Qs, n + 1);
		cp_async_wait<3>(); // Mb(n), V(n)
		__syncthreads();

		// Phase 2: Y = V - e^gam X, stored transposed (Y^T [v][t]).
#pragma unroll
		for (int j = 0; j < JT; j++)
#pragma unroll
			for (int hh = 0; hh < 2; hh++) {
				const int r = rw + gq + 8 * hh, c = cg + 8 * j + 2 * cq;
				const float eg = __expf(gm[r]);
				const float y0 = bf2f(Vs[r * LDV + c]) - eg * accKS[j][2 * hh];
				const float y1 = bf2f(Vs[r * LDV + c + 1]) - eg * accKS[j][2 * hh + 1];
				Ys[c * LDC + r] = f2bf(y0);
				Ys[(c + 1) * LDC + r] = f2bf(y1);
			}
		__syncthreads();

		// Phase 3: Δ = Mb Y; store Δ^T and its decayed copy.
		float accV[JT][4];
#pragma unroll
		for (int j = 0; j < JT; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				accV[j][e] = 0.0f;
#pragma unroll
		for (int kc = 0; kc < 4; kc++) {
			unsigned at[4];
			lda_frag(at, Mbs + rw * LDC + 16 * kc, LDC, lane);
#pragma unroll
			for (int j = 0; j < JT; j++) {
				unsigned b[2];
				ldb_frag(b, Ys + (cg + 8 * j) * LDC + 16 * kc, LDC, lane);
				mma_bf16(accV[j], at, b);
			}
		}
		const float gC = gm[GDN_C - 1];
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			const int r = rw + gq + 8 * hh;
			const float dec = __expf(gC - gm[r]);
#pragma unroll
			for (int j = 0; j < JT; j++) {
				const int c = cg + 8 * j + 2 * cq;
				Dls[c * LDC + r] = f2bf(accV[j][2 * hh]);
				Dls[(c + 1) * LDC + r] = f2bf(accV[j][2 * hh + 1]);
				Dl2s[c * LDC + r] = f2bf(dec * accV[j][2 * hh]);
				Dl2s[(c + 1) * LDC + r] = f2bf(dec * accV[j][2 * hh + 1]);
			}
		}
		__syncthreads(); // Mbs, Vs, Ys consumed
		io.issue_MbV(Mbs, Vs, n + 1);
		cp_async_wait<3>(); // P(n)
		__syncthreads();

		// Phase 4: O = e^gam QS + P Δ, written out.
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			const float eg = __expf(gm[rw + gq + 8 * hh]);
#pragma unroll
			for (int j = 0; j < JT; j++) {
				accQS[j][2 * hh] *= eg;
				accQS[j][2 * hh + 1] *= eg;
			}
		}
#pragma unroll
		for (int kc = 0; kc < 4; kc++) {
			unsigned ap[4];
			lda_frag(ap, Ps + rw * LDC + 16 * kc, LDC, lane);
#pragma unroll
			for (int j = 0; j < JT; j++) {
				unsigned b[2];
				ldb_frag(b, Dls + (cg + 8 * j) * LDC + 16 * kc, LDC, lane);
				mma_bf16(accQS[j], ap, b);
			}
		}
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			const int t = n * GDN_C + rw + gq + 8 * hh;
			if (t < T) {
#pragma unroll
				for (int j = 0; j < JT; j++) {
					const int c = vb + cg + 8 * j + 2 * cq;
					Tout *o = out + (size_t)t * ldo + h * 128 + c;
					if (sizeof(Tout) == 2)
						*(unsigned *)o = pack_bf2(accQS[j][2 * hh], accQS[j][2 * hh + 1]);
					else
						*(float2 *)o = make_float2(accQS[j][2 * hh], accQS[j][2 * hh + 1]);
				}
			}
		}

		// Phase 5: S^T = e^gam_C S^T + (decayed Δ)^T K.
		const float lam = __expf(gC);
#pragma unroll
		for (int mi = 0; mi < MT; mi++)
#pragma unroll
			for (int j = 0; j < NTS; j++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					accS[mi][j][e] *= lam;
#pragma unroll
		for (int kc = 0; kc < 4; kc++) {
			unsigned av[MT][4];
#pragma unroll
			for (int mi = 0; mi < MT; mi++)
				lda_frag(av[mi], Dl2s + 16 * mi * LDC + 16 * kc, LDC, lane);
#pragma unroll
			for (int jp = 0; jp < NTS / 2; jp++) {
				unsigned b[4];
				ldb_frag_trans_x2(b, Kc + 16 * kc * LDK + dk0 + 16 * jp, LDK, lane);
#pragma unroll
				for (int mi = 0; mi < MT; mi++) {
					mma_bf16(accS[mi][2 * jp], av[mi], b);
					mma_bf16(accS[mi][2 * jp + 1], av[mi], b + 2);
				}
			}
		}
		__syncthreads(); // Ps, K(n), Δ copies and Ss consumed
		io.issue_P(Ps, n + 1);
		write_Ss<MT, NTS>(Ss, accS, gq, cq, dk0);
	}
	cp_async_wait<0>();
#pragma unroll
	for (int mi = 0; mi < MT; mi++)
#pragma unroll
		for (int j = 0; j < NTS; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int vv = 16 * mi + gq + 8 * (e >> 1), d = dk0 + 8 * j + 2 * cq + (e & 1);
				state[((size_t)h * 128 + d) * 128 + vb + vv] = accS[mi][j][e];
			}
}

template <int BV, int NW, typename Tout>
static int scan_bf16_launch(const GdnArgs &a, const void *scratch, cudaStream_t st) {
	const size_t sm = ScanSmem<BV>::bytes;
	k_gdn_scan_bf16<BV, NW, Tout><<<dim3(128 / BV, a.NV), NW * 32, sm, st>>>(
	    (const bf16_t *)a.q, a.ldq, (const bf16_t *)a.k, a.ldk, (const bf16_t *)a.v, a.ldv, (Tout *)a.out, a.ldo,
	    a.state, a.T, a.NK, a.NV, scratch);
	QR_CKL("gdn_scan_bf16");
	return QR_OK;
}

// The scan's launch shape: 432, 832 or 864 (warps · 100 + value block), or
// the value block alone (32: 432, 64: 864, as before the shapes had warps).
static int scan_shape(int bv) { return bv == 32 ? 432 : bv == 64 ? 864 : bv; }

// gdn_scan_wg.cu: the warpgroup-MMA scan, shape 1064 (one warpgroup, 64
// value columns), where the device runs it (set up by qr_gdn_init).
int qr_gdn_scan_wg_init(bool *ready);
int gdn_scan_wg(const GdnArgs &a, int out_f32, const bf16_t *P, const bf16_t *Mb, const float *gam,
                cudaStream_t st);
static bool g_scan_wg_ready = false;
int gdn_scan_default() { return g_scan_wg_ready ? 1064 : GDN_SCAN_MMA_SYNC; }

static int check_bf16_args(const GdnArgs &a, int bv) {
	QR_ARG(a.DK == 128 && a.DV == 128, "gdn bf16 chunked: needs dk = dv = 128, got %d/%d", a.DK, a.DV);
	QR_ARG(a.NV % a.NK == 0, "gdn bf16: nv %% nk != 0");
	const int sh = scan_shape(bv);
	QR_ARG(sh == 432 || sh == 832 || sh == 864 || sh == 1064,
	       "gdn bf16: scan shape %d (432, 832, 864 or 1064; 32 and 64 name 432 and 864)", bv);
	QR_ARG(sh != 1064 || g_scan_wg_ready, "gdn bf16: scan shape 1064 not built for this device (it needs sm_90a)");
	QR_ARG(a.ldq % 8 == 0 && a.ldk % 8 == 0 && a.ldv % 8 == 0 && a.ldo % 2 == 0 && ((uintptr_t)a.q & 15) == 0 &&
	           ((uintptr_t)a.k & 15) == 0 && ((uintptr_t)a.v & 15) == 0,
	       "gdn bf16: q/k/v need 16-byte aligned rows");
	return QR_OK;
}

int gdn_prep_bf16(const GdnArgs &a, void *scratch, cudaStream_t st) {
	QR_TRY(check_bf16_args(a, 32));
	if (a.T == 0)
		return QR_OK;
	const int nc = (a.T + GDN_C - 1) / GDN_C;
	k_gdn_prep_bf16<<<dim3(nc, a.NV), 128, BF16_PREP_SMEM, st>>>((const bf16_t *)a.q, a.ldq, (const bf16_t *)a.k,
	                                                             a.ldk, a.g, a.beta, a.T, a.NK, a.NV, scratch);
	QR_CKL("gdn_prep_bf16");
	return QR_OK;
}

int gdn_scan_bf16(const GdnArgs &a, int bv, int out_f32, const void *scratch, cudaStream_t st) {
	QR_TRY(check_bf16_args(a, bv));
	if (a.T == 0)
		return QR_OK;
	switch (scan_shape(bv)) {
	case 1064: {
		const GdnScratch sc = GdnScratch::at((void *)scratch, a.NV, (a.T + GDN_C - 1) / GDN_C, sizeof(bf16_t));
		return gdn_scan_wg(a, out_f32, (const bf16_t *)sc.P, (const bf16_t *)sc.Mb, sc.gam, st);
	}
	case 432:
		return out_f32 ? scan_bf16_launch<32, 4, float>(a, scratch, st) : scan_bf16_launch<32, 4, bf16_t>(a, scratch, st);
	case 832:
		return out_f32 ? scan_bf16_launch<32, 8, float>(a, scratch, st) : scan_bf16_launch<32, 8, bf16_t>(a, scratch, st);
	default:
		return out_f32 ? scan_bf16_launch<64, 8, float>(a, scratch, st) : scan_bf16_launch<64, 8, bf16_t>(a, scratch, st);
	}
}

int gdn_chunk_bf16(const GdnArgs &a, int bv, int out_f32, void *scratch, cudaStream_t st) {
	QR_TRY(gdn_prep_bf16(a, scratch, st));
	return gdn_scan_bf16(a, bv, out_f32, scratch, st);
}

// Called once from qr_init: opt in to large shared memory where needed.
int qr_gdn_init() {
	int dev = g_qr.device;
	QR_CK(cudaDeviceGetAttribute(&qr_max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
	QR_CK(cudaFuncSetAttribute(k_gdn_prep_bf16, cudaFuncAttributeMaxDynamicSharedMemorySize, BF16_PREP_SMEM));
#define SCAN_SMEM(BV, NW)                                                                                          \
	QR_CK(cudaFuncSetAttribute(k_gdn_scan_bf16<BV, NW, float>, cudaFuncAttributeMaxDynamicSharedMemorySize,          \
	                           (int)ScanSmem<BV>::bytes));                                                            \
	QR_CK(cudaFuncSetAttribute(k_gdn_scan_bf16<BV, NW, bf16_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,         \
	                           (int)ScanSmem<BV>::bytes))
	SCAN_SMEM(32, 4);
	SCAN_SMEM(32, 8);
	SCAN_SMEM(64, 8);
#undef SCAN_SMEM
	return qr_gdn_scan_wg_init(&g_scan_wg_ready);
}

extern "C" int qr_gdn_forward(float *out, const float *q, const float *k, const float *v, const float *g,
                              const float *beta, int t, int nk, int nv, int dk, int dv, float *state, int variant) {
	QR_TRY(qr_require());
	QR_ARG(t >= 0 && nk > 0 && nv > 0 && dk > 0 && dv > 0 && nv % nk == 0, "qr_gdn_forward: bad dims");
	const size_t nq = (size_t)t * nk * dk, nvv = (size_t)t * nv * dv, ng = (size_t)t * nv,
	             ns = (size_t)nv * dk * dv;
	DevBuf dq, dk_, dv_, dg, db, ds, dout, scratch, q16, k16, v16;
	QR_TRY(upload(dq, q, nq));
	QR_TRY(upload(dk_, k, nq));
	QR_TRY(upload(dv_, v, nvv));
	QR_TRY(upload(dg, g, ng));
	QR_TRY(upload(db, beta, ng));
	QR_TRY(upload(ds, state, ns));
	QR_TRY(dout.alloc(nvv * 4));
	QR_TRY(qr_fill_nan(dout.p, nvv * 4, g_qr.stream));
	GdnArgs a = {t, nk, nv, dk, dv, dq.p, nk * dk, dk_.p, nk * dk, dv_.p, nv * dv, dg.as<float>(), db.as<float>(),
	             dout.p, nv * dv, ds.as<float>()};
	int shape = gdn_scan_default();
	if (variant >= 100) { // a scan shape: the bf16 chunked form with it (tests)
		shape = variant;
		variant = QR_GDN_CHUNK_BF16;
	}
	switch (variant) {
	case QR_GDN_CHUNK_F32:
		QR_TRY(scratch.alloc(gdn_scratch_bytes(t, nv, 1)));
		QR_TRY(gdn_chunk_f32(a, scratch.p, g_qr.stream));
		break;
	case QR_GDN_CHUNK_BF16:
		QR_TRY(scratch.alloc(gdn_scratch_bytes(t, nv, 0)));
		QR_TRY(q16.alloc(nq * 2));
		QR_TRY(k16.alloc(nq * 2));
		QR_TRY(v16.alloc(nvv * 2));
		QR_TRY(qr_convert_f32_bf16(q16.as<bf16_t>(), dq.as<float>(), nq, g_qr.stream));
		QR_TRY(qr_convert_f32_bf16(k16.as<bf16_t>(), dk_.as<float>(), nq, g_qr.stream));
		QR_TRY(qr_convert_f32_bf16(v16.as<bf16_t>(), dv_.as<float>(), nvv, g_qr.stream));
		a.q = q16.p;
		a.k = k16.p;
		a.v = v16.p;
		QR_TRY(gdn_chunk_bf16(a, shape, 1, scratch.p, g_qr.stream));
		break;
	case QR_GDN_RECURRENT:
		QR_TRY(gdn_recurrent(a, 0, 0, g_qr.stream));
		break;
	default:
		QR_ARG(false, "qr_gdn_forward: unknown variant %d", variant);
	}
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	QR_TRY(download(out, dout, nvv));
	return download(state, ds, ns);
}
