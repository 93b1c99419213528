// flash_attn_wg.cu: the prefill flash attention on Hopper's warpgroup MMA
// (wgmma.mma_async, sm_90a), the same gated causal GQA attention as
// k_flash_attn in flash_attn.cu, with the same online softmax in base 2 and
// epilogue (flash_common.cuh):
//
//	y[t, h] = σ(gate[t, h]) ⊙ Σ_{j ≤ pos0+t} softmax_j(q[t,h]·k[j,h/g] / √d) v[j,h/g]
//
// A block of NWG warpgroups (128 threads each) takes BM = 64·NWG queries of
// one head; warpgroup wg owns rows 64·wg.., its warp w rows 16·w.. of those.
// S = Q Kᵀ is an m64n64k16 chain a key tile with both operands read from
// shared memory; O += P V is an m64n256k16 chain with P in registers (the S
// accumulator's layout is the A operand's) and V read transposed from shared
// memory. Tiles are stored in the 128-byte swizzle that wgmma's descriptors
// name (wgmma.cuh): a [rows, 256] tile is four column blocks of 64
// elements, each row 128 bytes, its 16-byte chunk j at j ^ (row % 8). Every thread loads with
// cp.async, double-buffered, as in flash_attn.cu. The naive reference is
// attention.Naive on the host (TestFlashAttentionMatchesCPU runs each shape).
//
// The kernel body exists only in the sm_90a build; qr_flash_attn_wg_init
// finds out whether this device runs it (flash_attn.cu offers the shape only then).
#include <math.h>

#include "common.cuh"
#include "flash_common.cuh"
#include "internal.cuh"
#include "wgmma.cuh"

#define FW_D 256

// Bytes of shared memory of the NWG-warpgroup, BN-key shape: the query tile,
// two buffers each of keys and values, and 1024 bytes to align the swizzle.
static constexpr int fw_smem(int nwg, int bn) { return (64 * nwg + 4 * bn) * FW_D * 2 + 1024; }

// Rows [0, rows) of a [*, 256] bf16 matrix into the swizzled tile at shared
// address s; rows at or past `valid` are zero-filled (masked scores; a zero
// V row keeps 0·V finite).
template <int NT>
__device__ __forceinline__ void fw_load_rows(unsigned s, const bf16_t *g, size_t gstride, int rows, int valid,
                                             int tid) {
	for (int i = tid; i < rows * 32; i += NT) {
		const int r = i >> 5, ch = i & 31;
		const unsigned dst = s + wg_off(r, ch, rows);
		if (r < valid)
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(g + (size_t)r * gstride + ch * 8));
		else
			asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0));
	}
}

// A whole [BN, 256] tile (every row valid): thread tid copies chunk tid % 32
// of rows tid/32 + (NT/32)·j, whose swizzled offsets step by a constant.
template <int NT, int BN>
__device__ __forceinline__ void fw_load_tile(unsigned s, const bf16_t *g, size_t gstride, int tid) {
	constexpr int RSTEP = NT / 32, PER = BN / RSTEP;
	static_assert(PER * RSTEP == BN && RSTEP % 8 == 0, "tile rows per thread");
	const int r = tid >> 5, ch = tid & 31;
	const bf16_t *src = g + (size_t)r * gstride + ch * 8;
	const size_t step = (size_t)RSTEP * gstride;
	s += wg_off(r, ch, BN);
#pragma unroll
	for (int j = 0; j < PER; j++, src += step)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s + j * RSTEP * 128), "l"(src));
}

template <int NWG, int BN>
__global__ void __launch_bounds__(128 * NWG, 1)
    k_flash_attn_wg(bf16_t *__restrict__ y, const bf16_t *__restrict__ q, const bf16_t *__restrict__ kc,
                    const bf16_t *__restrict__ vc, const bf16_t *__restrict__ gate, int ldg, int T, int pos0, int nh,
                    int nkv, float scale_log2) {
#ifdef QR_WGMMA
	static_assert(BN == 64, "the S chain is m64n64k16");
	constexpr int BM = 64 * NWG, NT = 128 * NWG;
	extern __shared__ unsigned char fw_smem_raw[];
	const unsigned sbase = (smem_addr(fw_smem_raw) + 1023u) & ~1023u;
	const unsigned sQ = sbase, sK = sQ + BM * 512, sV = sK + 2 * BN * 512; // K, V: [2][BN rows of 512 bytes]
	const int nqt = gridDim.x;
	const int qt = nqt - 1 - blockIdx.x; // heaviest (latest) query tiles first
	const int h = blockIdx.y, hk = h / (nh / nkv);
	const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, w = (tid >> 5) & 3;
	const int g = lane >> 2, c = lane & 3;
	const int q0 = qt * BM;
	const int qrows = min(BM, T - q0);
	const size_t kstride = (size_t)nkv * FW_D;
	const bf16_t *kbase = kc + (size_t)hk * FW_D, *vbase = vc + (size_t)hk * FW_D;
	const int last_key = pos0 + q0 + qrows - 1;
	const int nkt = last_key / BN + 1;
	const int S = pos0 + T;

	// Key tile k0's keys or values into buffer b: whole tiles by the fast
	// loader, the last partial one (zero-filled) by the general one.
	auto load_tile = [&](unsigned dst, const bf16_t *src, int k0) {
		src += (size_t)k0 * kstride;
		if (S - k0 >= BN)
			fw_load_tile<NT, BN>(dst, src, kstride, tid);
		else
			fw_load_rows<NT>(dst, src, kstride, BN, S - k0, tid);
	};
	fw_load_rows<NT>(sQ, q + ((size_t)q0 * nh + h) * FW_D, (size_t)nh * FW_D, BM, qrows, tid);
	load_tile(sK, kbase, 0);
	cp_async_commit();

	float o[128];
#pragma unroll
	for (int i = 0; i < 128; i++)
		o[i] = 0.0f;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	const int wgfirst = pos0 + q0 + 64 * wg;          // position of this warpgroup's first row
	const int p0 = wgfirst + 16 * w + g, p1 = p0 + 8; // positions of this thread's two rows
	const unsigned qa = sQ + wg * 64 * 128;           // this warpgroup's rows in each column block
	unsigned pa[BN / 16][4];                          // P of the tile before, read by its PV chain

	// S = Q K_ktᵀ: sixteen k16 steps, both operands K-major; the first
	// overwrites S (non-wgmma writes to S inside the chain would serialize it).
	auto qk = [&](float *s, int kt) {
		const unsigned kb = sK + (kt & 1) * BN * 512;
#pragma unroll
		for (int kk = 0; kk < FW_D / 16; kk++) {
			const uint64_t da = wg_desc(qa + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024);
			const uint64_t db = wg_desc(kb + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024);
			wg_m64n64k16_ss(s, da, db, kk > 0);
		}
		wg_commit();
	};
	// O += P V_kt: keys 16·kk.. of the tile are two 8-row groups (1024 bytes
	// apart); the 256 columns are four 64-column blocks (BN rows of 128
	// bytes apart).
	auto pv = [&](int kt) {
		const unsigned vb = sV + (kt & 1) * BN * 512;
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++)
			wg_m64n256k16_rs_t(o, pa[kk], wg_desc(vb + kk * 16 * 128, BN * 128, 1024), 1);
		wg_commit();
	};
	// The online softmax of S_kt (flash_common.cuh): P into pn, O's scale
	// per row in c0, c1 (O is rescaled once the tensor cores are done with it).
	float c0, c1;
	unsigned pn[BN / 16][4];
	auto softmax = [&](float *s, int kt) {
		fa_softmax_tile<BN, 0>(s, kt * BN, wgfirst + 16 * w, p0, p1, c, scale_log2, m0, m1, l0, l1, c0, c1, pn,
		                       nullptr);
	};
	auto keep_p = [&]() {
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
			for (int i = 0; i < 4; i++)
				pa[kk][i] = pn[kk][i];
	};
	// Loads at step kt: K_{kt+1} and V_kt, both used at step kt+1, into the
	// buffers steps kt-1 and kt-2 used (their chains are done).
	auto step_loads = [&](int kt) {
		cp_async_wait<0>();
		wg_fence_proxy();
		__syncthreads(); // K_kt and V_{kt-1} landed and are visible to wgmma
		if (kt + 1 < nkt)
			load_tile(sK + ((kt + 1) & 1) * BN * 512, kbase, (kt + 1) * BN);
		if (kt < nkt)
			load_tile(sV + (kt & 1) * BN * 512, vbase, kt * BN);
		cp_async_commit();
	};

	// Step kt issues S_kt and then O += P_{kt-1} V_{kt-1}, so the softmax of
	// S_kt runs while the tensor cores add the tile before; O is rescaled
	// once that chain is done. Every region from a wgmma fence to its wait
	// is straight-line code, which keeps the chains pipelined. Both
	// warpgroups visit every tile of the block: the first one's last tile
	// is fully masked (P = 0), which costs under 1% at long inputs.
	float s[BN / 2];
	step_loads(0);
	wg_fence();
	qk(s, 0);
	wg_wait<0>();
	wg_fence_regs<BN / 2>(s);
	softmax(s, 0);
	keep_p();
	for (int kt = 1; kt < nkt; kt++) {
		step_loads(kt);
		wg_fence();
		qk(s, kt);
		pv(kt - 1);
		wg_wait<1>(); // S_kt is done; the PV chain may still run
		wg_fence_regs<BN / 2>(s);
		softmax(s, kt);
		wg_wait<0>();
		wg_fence_regs<128>(o);
		wg_keep_regs<BN / 4>(&pa[0][0]); // the chain read P until here: pn must not take its registers
		// O holds every tile before kt at the old max: rescale it.
		fa_rescale<FW_D>(o, c0, c1);
		keep_p();
	}
	step_loads(nkt);
	wg_fence();
	pv(nkt - 1);
	wg_wait<0>();
	wg_fence_regs<128>(o);
	cp_async_wait<0>();
	fa_store_gated<FW_D>(y, gate, ldg, o, l0, l1, q0 + 64 * wg + 16 * w + g, T, h, nh, c);
#endif
}

// 1 where this build holds the wgmma kernel bodies for the running device.
__global__ void k_wgmma_probe(int *out) {
#ifdef QR_WGMMA
	*out = 1;
#else
	*out = 0;
#endif
}

int qr_wgmma_ready(bool *ok) {
	static int known = -1; // per process: one device (qr_init)
	if (known < 0) {
		cudaDeviceProp p;
		QR_CK(cudaGetDeviceProperties(&p, g_qr.device));
		int has = 0;
		if (p.major == 9 && p.minor == 0) {
			DevBuf flag;
			QR_TRY(flag.alloc(sizeof(int)));
			k_wgmma_probe<<<1, 1, 0, g_qr.stream>>>(flag.as<int>());
			QR_CKL("wgmma_probe");
			QR_CK(cudaMemcpyAsync(&has, flag.p, sizeof(int), cudaMemcpyDeviceToHost, g_qr.stream));
			QR_CK(cudaStreamSynchronize(g_qr.stream));
		}
		known = has;
	}
	*ok = known == 1;
	return QR_OK;
}

// The warpgroup shapes, named 1000·warpgroups + key tile (the mma.sync
// shapes of flash_attn.cu are 100·warps + key tile, all below 1000).
struct FwShape {
	int name, smem;
	const void *fn;
	int threads, rows; // a block's threads and queries
	bool ok;
};
static FwShape g_fw_shapes[] = {
    {2064, fw_smem(2, 64), (const void *)k_flash_attn_wg<2, 64>, 256, 128, false},
};

// Sets the shapes up on this device when it runs their code
// (qr_wgmma_ready) and holds their shared memory. *ready: whether shape
// `want` is set up.
int qr_flash_attn_wg_init(int want, bool *ready) {
	*ready = false;
	for (FwShape &s : g_fw_shapes)
		s.ok = false;
	bool wg = false;
	QR_TRY(qr_wgmma_ready(&wg));
	if (!wg)
		return QR_OK;
	int optin = 0;
	QR_CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g_qr.device));
	for (FwShape &s : g_fw_shapes) {
		if (s.smem > optin)
			continue;
		QR_CK(cudaFuncSetAttribute(s.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, s.smem));
		s.ok = true;
		*ready = *ready || s.name == want;
	}
	return QR_OK;
}

// Launches warpgroup shape `name` if it is one and the device runs it:
// *took is false when the name is not a warpgroup shape.
int launch_flash_attn_wg(int name, bool *took, bf16_t *y, const bf16_t *q, const bf16_t *kc, const bf16_t *vc,
                         const bf16_t *gate, int ldg, int t, int pos0, int nh, int nkv, float scale_log2,
                         cudaStream_t st) {
	*took = false;
	for (const FwShape &s : g_fw_shapes) {
		if (s.name != name)
			continue;
		*took = true;
		QR_ARG(s.ok, "flash attention: shape %d not built or too large for this device (it needs sm_90a)", name);
		void *args[] = {&y, &q, &kc, &vc, &gate, &ldg, &t, &pos0, &nh, &nkv, &scale_log2};
		QR_CK(cudaLaunchKernel(s.fn, dim3(cdiv(t, s.rows), nh), dim3(s.threads), args, s.smem, st));
	}
	return QR_OK;
}
