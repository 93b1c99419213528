// gdn_scan_wg.cu: the chunked gated delta rule's sequential scan on Hopper's
// warpgroup MMA (sm_90a): the same per-chunk steps as k_gdn_scan_bf16 in
// gdn_chunk.cu, on the prep's P, Mb = M diag(β) and γ (gdn_chunk_prep.cuh
// states the names), with the state kept in registers from the first chunk
// to the last:
//
//	Xᵀ = Sᵀ Kᵀ,  Yᵀ = Vᵀ − Xᵀ diag(e^γ),  Δᵀ = Yᵀ Mbᵀ,
//	Oᵀ = (Sᵀ Qᵀ) diag(e^γ) + Δᵀ Pᵀ,  Sᵀ ← e^γ_C Sᵀ + Δᵀ diag(e^(γ_C − γ)) K.
//
// Every product is taken transposed so that the value columns are the M of
// the warpgroup MMA: one warpgroup (128 threads) owns 64 value columns of one
// head, its fp32 Sᵀ [64, 128] is a wgmma accumulator, and each product's A
// operand (Sᵀ, Yᵀ, Δᵀ) comes from the accumulator before it in registers,
// converted to bf16 where k_gdn_scan_bf16 stores bf16 copies. Only the
// chunk's inputs (K, Q, V, Mb, P, γ) pass through shared memory: a ring of
// three stages filled by cp.async two chunks ahead, K, Q, Mb and P in
// wgmma's 128-byte swizzle (wgmma.cuh). K serves twice: K-major for Sᵀ Kᵀ
// and MN-major for the state update. The naive reference is the gated
// delta rule on the host (TestGatedDeltaMatchesCPU runs this shape).
#include "common.cuh"
#include "internal.cuh"
#include "wgmma.cuh"

#define GW_C 64   // chunk length (GDN_C of gdn_chunk_prep.cuh)
#define GW_BV 64  // value columns a block
#define GW_NS 3   // stages of the input ring
#define GW_LDV 72 // V tile row stride in elements (conflict-free column reads)

// Byte offsets within a stage; the swizzled tiles start on 1024 bytes.
struct GwStage {
	static constexpr unsigned K = 0;          // [64 t][128 dk], two column blocks
	static constexpr unsigned Q = 16384;      // the same
	static constexpr unsigned Mb = 32768;     // [64 t][64 t']
	static constexpr unsigned P = 40960;      // [64 t][64 t']
	static constexpr unsigned V = 49152;      // [64 t][GW_LDV] bf16, plain
	static constexpr unsigned gam = 58368;    // [64] f32
	static constexpr unsigned bytes = 59392;  // 58 KB
};
static_assert(GwStage::V + GW_C * GW_LDV * 2 <= GwStage::gam && GwStage::gam + 256 <= GwStage::bytes &&
                  GwStage::bytes % 1024 == 0,
              "stage layout");
static constexpr int gw_smem_bytes() { return GW_NS * GwStage::bytes + 1024; }

__device__ __forceinline__ void gw_cp16(unsigned dst, const void *src) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void gw_zero16(unsigned dst) {
	asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0));
}

// One chunk's inputs into a stage: rows past T are zero (their K, Q and V
// add nothing; their outputs are not written). One cp.async group a call,
// also past the last chunk, so the waits count the same every step.
struct GwLoader {
	const bf16_t *q, *k, *v, *P, *Mb;
	const float *gam;
	int ldq, ldk, ldv, T, nc, hk, h, vb, tid;

	__device__ __forceinline__ void load(unsigned sb, int n) const {
		if (n < nc) {
			const int t0 = n * GW_C;
#pragma unroll
			for (int it = 0; it < GW_C * 16 / 128; it++) {
				const int i = tid + 128 * it, r = i >> 4, ch = i & 15, t = t0 + r;
				const unsigned off = wg_off(r, ch, GW_C);
				if (t < T) {
					gw_cp16(sb + GwStage::K + off, k + (size_t)t * ldk + hk * 128 + ch * 8);
					gw_cp16(sb + GwStage::Q + off, q + (size_t)t * ldq + hk * 128 + ch * 8);
				} else {
					gw_zero16(sb + GwStage::K + off);
					gw_zero16(sb + GwStage::Q + off);
				}
			}
			const bf16_t *Pc = P + (size_t)n * GW_C * GW_C, *Mbc = Mb + (size_t)n * GW_C * GW_C;
#pragma unroll
			for (int it = 0; it < GW_C * 8 / 128; it++) {
				const int i = tid + 128 * it, r = i >> 3, ch = i & 7, t = t0 + r;
				const unsigned off = wg_off(r, ch, GW_C);
				gw_cp16(sb + GwStage::Mb + off, Mbc + r * GW_C + ch * 8);
				gw_cp16(sb + GwStage::P + off, Pc + r * GW_C + ch * 8);
				const unsigned dv = sb + GwStage::V + (r * GW_LDV + ch * 8) * 2;
				if (t < T)
					gw_cp16(dv, v + (size_t)t * ldv + h * 128 + vb + ch * 8);
				else
					gw_zero16(dv);
			}
			if (tid < 16)
				gw_cp16(sb + GwStage::gam + tid * 16, gam + (size_t)n * GW_C + tid * 4);
		}
		cp_async_commit();
	}
};

// Grid (128 / GW_BV, NV), 128 threads. P, Mb [NV][nc][64][64] bf16 and gam
// [NV][nc][64] are the prep's scratch; state [NV][128 dk][128 dv] fp32.
template <typename Tout>
__global__ void __launch_bounds__(128, 1)
    k_gdn_scan_wg(const bf16_t *__restrict__ q, int ldq, const bf16_t *__restrict__ k, int ldk,
                  const bf16_t *__restrict__ v, int ldv, Tout *__restrict__ out, int ldo, float *state, int T, int NK,
                  int NV, const bf16_t *__restrict__ Pg, const bf16_t *__restrict__ Mbg,
                  const float *__restrict__ gamg) {
#ifdef QR_WGMMA
	extern __shared__ unsigned char gw_smem[];
	const unsigned sbase = (smem_addr(gw_smem) + 1023u) & ~1023u;
	unsigned char *gbase = gw_smem + (sbase - smem_addr(gw_smem)); // the same bytes, generic address
	const int h = blockIdx.y, vb = blockIdx.x * GW_BV, hk = h / (NV / NK);
	const int nc = (T + GW_C - 1) / GW_C;
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c = lane & 3;
	const int v0 = 16 * w + g; // this thread's value rows: v0 and v0 + 8 (of the block's 64)
	const GwLoader io = {q,   k,   v,  Pg + (size_t)h * nc * GW_C * GW_C, Mbg + (size_t)h * nc * GW_C * GW_C,
	                     gamg + (size_t)h * nc * GW_C, ldq, ldk, ldv, T, nc, hk, h, vb, tid};

	// Sᵀ: sacc[4j + e] is value v0 + 8(e >> 1), key dim 8j + 2c + (e & 1).
	float sacc[64];
#pragma unroll
	for (int j = 0; j < 16; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			sacc[4 * j + e] = state[((size_t)h * 128 + 8 * j + 2 * c + (e & 1)) * 128 + vb + v0 + 8 * (e >> 1)];
	io.load(sbase, 0);
	io.load(sbase + GwStage::bytes, 1);

	for (int n = 0; n < nc; n++) {
		const unsigned sb = sbase + (n % GW_NS) * GwStage::bytes;
		const unsigned char *gs = gbase + (n % GW_NS) * GwStage::bytes;
		const bf16_t *Vs = (const bf16_t *)(gs + GwStage::V);
		const float *gam = (const float *)(gs + GwStage::gam);
		cp_async_wait<GW_NS - 2>(); // chunk n landed (chunk n + 1 may still be in flight)
		wg_fence_proxy();
		__syncthreads();

		// Xᵀ = Sᵀ Kᵀ and (Q S)ᵀ = Sᵀ Qᵀ: k steps over the key dim.
		unsigned aS[8][4];
#pragma unroll
		for (int kk = 0; kk < 8; kk++)
			wg_acc_to_a(aS[kk], sacc, kk);
		float xacc[32], qacc[32];
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < 8; kk++)
			wg_m64n64k16_rs(xacc, aS[kk], wg_desc(sb + GwStage::K + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024),
			                kk > 0);
		wg_commit();
#pragma unroll
		for (int kk = 0; kk < 8; kk++)
			wg_m64n64k16_rs(qacc, aS[kk], wg_desc(sb + GwStage::Q + (kk >> 2) * 8192 + (kk & 3) * 32, 16, 1024),
			                kk > 0);
		wg_commit();
		// Chunk n + 2 into the stage chunk n - 1 used: every thread has
		// passed the barrier above, so its products are done.
		io.load(sbase + ((n + 2) % GW_NS) * GwStage::bytes, n + 2);
		// e^γ_t and e^(γ_C − γ_t) (both at most 1: γ falls along the chunk)
		// of this thread's columns t = 8j + 2c + (e & 1), index 2j + (e & 1).
		const float gC = gam[GW_C - 1], lam = __expf(gC);
		float eg[16], dec[16];
#pragma unroll
		for (int i = 0; i < 16; i++) {
			const float gt = gam[8 * (i >> 1) + 2 * c + (i & 1)];
			eg[i] = __expf(gt);
			dec[i] = __expf(gC - gt);
		}
		wg_wait<1>(); // Xᵀ is done; (Q S)ᵀ may still run
		wg_fence_regs<32>(xacc);

		// Yᵀ = Vᵀ − Xᵀ diag(e^γ), in place, then its A fragments.
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int t = 8 * j + 2 * c + (e & 1), vv = v0 + 8 * (e >> 1);
				xacc[4 * j + e] = bf2f(Vs[t * GW_LDV + vv]) - eg[2 * j + (e & 1)] * xacc[4 * j + e];
			}
		unsigned aY[4][4];
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			wg_acc_to_a(aY[kk], xacc, kk);
		// Δᵀ = Yᵀ Mbᵀ: k steps over the chunk's rows t'.
		float dacc[32];
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			wg_m64n64k16_rs(dacc, aY[kk], wg_desc(sb + GwStage::Mb + kk * 32, 16, 1024), kk > 0);
		wg_commit();
		wg_wait<0>();
		wg_fence_regs<32>(dacc);
		wg_fence_regs<32>(qacc);
		wg_keep_regs<32>(&aS[0][0]); // both chains read Sᵀ until here
		wg_keep_regs<16>(&aY[0][0]);

		// Δᵀ for the output, Δᵀ diag(e^(γ_C − γ)) for the state.
		unsigned aD[4][4], aK[4][4];
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			wg_acc_to_a(aD[kk], dacc, kk);
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				dacc[4 * j + e] *= dec[2 * j + (e & 1)];
				qacc[4 * j + e] *= eg[2 * j + (e & 1)];
			}
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			wg_acc_to_a(aK[kk], dacc, kk);
#pragma unroll
		for (int i = 0; i < 64; i++)
			sacc[i] *= lam;
		// Sᵀ += (decayed Δ)ᵀ K: K as the MN-major operand, 16 rows a step,
		// its two 64-column blocks 8192 bytes apart. Oᵀ += Δᵀ Pᵀ.
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			wg_m64n128k16_rs_t(sacc, aK[kk], wg_desc(sb + GwStage::K + kk * 2048, 8192, 1024), 1);
		wg_commit();
#pragma unroll
		for (int kk = 0; kk < 4; kk++)
			wg_m64n64k16_rs(qacc, aD[kk], wg_desc(sb + GwStage::P + kk * 32, 16, 1024), 1);
		wg_commit();
		wg_wait<0>();
		wg_fence_regs<64>(sacc);
		wg_fence_regs<32>(qacc);
		wg_keep_regs<16>(&aD[0][0]);
		wg_keep_regs<16>(&aK[0][0]);

		// Oᵀ out: qacc[4j + e] is value v0 + 8(e >> 1) of row n·64 + 8j + 2c + (e & 1).
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int t = n * GW_C + 8 * j + 2 * c + (e & 1);
				if (t < T) {
					Tout *o = out + (size_t)t * ldo + h * 128 + vb + v0 + 8 * (e >> 1);
					if constexpr (sizeof(Tout) == 2)
						*o = f2bf(qacc[4 * j + e]);
					else
						*o = qacc[4 * j + e];
				}
			}
	}
	cp_async_wait<0>();
#pragma unroll
	for (int j = 0; j < 16; j++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			state[((size_t)h * 128 + 8 * j + 2 * c + (e & 1)) * 128 + vb + v0 + 8 * (e >> 1)] = sacc[4 * j + e];
#endif
}

// Sets the scan up on this device (its shared memory) when it runs wgmma
// code; *ready says whether it did.
int qr_gdn_scan_wg_init(bool *ready) {
	*ready = false;
	bool wg = false;
	QR_TRY(qr_wgmma_ready(&wg));
	int optin = 0;
	QR_CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g_qr.device));
	if (!wg || optin < gw_smem_bytes())
		return QR_OK;
	QR_CK(cudaFuncSetAttribute(k_gdn_scan_wg<bf16_t>, cudaFuncAttributeMaxDynamicSharedMemorySize, gw_smem_bytes()));
	QR_CK(cudaFuncSetAttribute(k_gdn_scan_wg<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, gw_smem_bytes()));
	*ready = true;
	return QR_OK;
}

// The scan over a.T tokens from a.state, on the prep's scratch (P, Mb, gam:
// the bases of all heads); dk = dv = 128 (gdn_scan_bf16 checks).
int gdn_scan_wg(const GdnArgs &a, int out_f32, const bf16_t *P, const bf16_t *Mb, const float *gam,
                cudaStream_t st) {
	const dim3 grid(128 / GW_BV, a.NV);
	if (out_f32)
		k_gdn_scan_wg<float><<<grid, 128, gw_smem_bytes(), st>>>(
		    (const bf16_t *)a.q, a.ldq, (const bf16_t *)a.k, a.ldk, (const bf16_t *)a.v, a.ldv, (float *)a.out, a.ldo,
		    a.state, a.T, a.NK, a.NV, P, Mb, gam);
	else
		k_gdn_scan_wg<bf16_t><<<grid, 128, gw_smem_bytes(), st>>>(
		    (const bf16_t *)a.q, a.ldq, (const bf16_t *)a.k, a.ldk, (const bf16_t *)a.v, a.ldv, (bf16_t *)a.out,
		    a.ldo, a.state, a.T, a.NK, a.NV, P, Mb, gam);
	QR_CKL("gdn_scan_wg");
	return QR_OK;
}
