// flash_attn.cu: the prefill attention of the gated full-attention layer.
// Causal GQA flash attention on bf16 tensor cores (mma.sync m16n8k16, fp32
// accumulators), head dim 256, online softmax in base 2, the sigmoid output
// gate fused into the epilogue:
//
//	y[t, h] = σ(gate[t, h]) ⊙ Σ_{j ≤ pos0+t} softmax_j(q[t,h]·k[j,h/g] / √d) v[j,h/g]
//
// A block of NW warps takes BM = 16·NW queries of one head; each warp owns
// 16 query rows. Keys and values stream through shared memory BN rows at a
// time, double-buffered with cp.async. Warps whose rows all lie before a key
// tile skip its products (the causal triangle inside a tall block). Rows are
// padded by 16 bytes so ldmatrix rows fall in distinct bank groups. The
// naive reference is attention.Naive on the host (TestFlashAttentionMatchesCPU
// checks every shape against float64 sums).
#include <math.h>

#include "common.cuh"
#include "flash_common.cuh"
#include "internal.cuh"

#define FA_D 256
#define FA_LD (FA_D + 8)

// Bytes of shared memory of the NW-warp, BN-key shape: the query tile and
// two buffers each of keys and values.
static constexpr int fa_smem(int nw, int bn) { return (16 * nw + 4 * bn) * FA_LD * 2; }

__device__ __forceinline__ void ldsm_x4(unsigned r[4], const bf16_t *p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(smem_addr(p)));
}

// Copy rows [0, nrows) of a [*, D] bf16 tile into smem (FA_LD stride) with
// NT threads; rows at or past `valid` are zero-filled (their scores are
// masked, and a zero V row keeps 0·V finite).
template <int NT>
__device__ __forceinline__ void fa_load_rows(bf16_t *s, const bf16_t *g, size_t gstride, int nrows, int valid,
                                             int tid) {
	for (int i = tid; i < nrows * (FA_D / 8); i += NT) {
		const int r = i / (FA_D / 8), c = (i % (FA_D / 8)) * 8;
		bf16_t *dst = s + r * FA_LD + c;
		if (r < valid)
			cp_async16(dst, g + (size_t)r * gstride + c);
		else
			*(uint4 *)dst = make_uint4(0, 0, 0, 0);
	}
}

// Copy one whole [BN, D] tile (every row valid) into smem at shared address
// s: thread tid copies the 16 bytes at column 8·(tid % 32) of rows tid/32,
// tid/32 + NT/32, ...; the offsets are compile-time, so the steady state
// costs a cp.async and a pointer step per 16 bytes (the general loader's
// index arithmetic and branch were a third of the kernel's instructions).
template <int NT, int BN>
__device__ __forceinline__ void fa_load_tile(unsigned s, const bf16_t *g, size_t gstride, int tid) {
	constexpr int PER = BN * (FA_D / 8) / NT, RSTEP = NT / (FA_D / 8);
	static_assert(PER * NT == BN * (FA_D / 8), "tile pieces per thread");
	const int r = tid / (FA_D / 8), c = (tid % (FA_D / 8)) * 8;
	const bf16_t *src = g + (size_t)r * gstride + c;
	const size_t step = (size_t)RSTEP * gstride;
	s += (r * FA_LD + c) * 2;
#pragma unroll
	for (int j = 0; j < PER; j++, src += step)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s + j * RSTEP * FA_LD * 2), "l"(src));
}

template <int NW, int BN, int MINB>
__global__ void __launch_bounds__(32 * NW, MINB)
    k_flash_attn(bf16_t *__restrict__ y, const bf16_t *__restrict__ q, const bf16_t *__restrict__ kc,
                 const bf16_t *__restrict__ vc, const bf16_t *__restrict__ gate, int ldg, int T, int pos0, int nh,
                 int nkv, float scale_log2) {
	constexpr int BM = 16 * NW, NT = 32 * NW;
	extern __shared__ __align__(16) unsigned char qr_smem[];
	bf16_t *Qs = (bf16_t *)qr_smem;
	bf16_t *Ks = Qs + BM * FA_LD;     // [2][BN][FA_LD]
	bf16_t *Vs = Ks + 2 * BN * FA_LD; // [2][BN][FA_LD]
	const int nqt = gridDim.x;
	const int qt = nqt - 1 - blockIdx.x; // heaviest (latest) query tiles first
	const int h = blockIdx.y, hk = h / (nh / nkv);
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int g = lane >> 2, c = lane & 3;
	const int q0 = qt * BM;
	const int qrows = min(BM, T - q0);
	const size_t kstride = (size_t)nkv * FA_D;
	const bf16_t *kbase = kc + (size_t)hk * FA_D, *vbase = vc + (size_t)hk * FA_D;
	// The last key any row of this tile sees, and the key tiles to visit.
	const int last_key = pos0 + q0 + qrows - 1;
	const int nkt = last_key / BN + 1;
	const int S = pos0 + T;

	// Key tile at k0 into buffer b: whole tiles by the fast loader, the
	// last partial one (zero-filled) by the general one.
	auto load_kv = [&](int k0, int b) {
		bf16_t *kd = Ks + b * BN * FA_LD, *vd = Vs + b * BN * FA_LD;
		const bf16_t *ks = kbase + (size_t)k0 * kstride, *vs = vbase + (size_t)k0 * kstride;
		if (S - k0 >= BN) {
			fa_load_tile<NT, BN>(smem_addr(kd), ks, kstride, tid);
			fa_load_tile<NT, BN>(smem_addr(vd), vs, kstride, tid);
		} else {
			fa_load_rows<NT>(kd, ks, kstride, BN, S - k0, tid);
			fa_load_rows<NT>(vd, vs, kstride, BN, S - k0, tid);
		}
	};
	fa_load_rows<NT>(Qs, q + ((size_t)q0 * nh + h) * FA_D, (size_t)nh * FA_D, BM, qrows, tid);
	load_kv(0, 0);
	cp_async_commit();

	float o[FA_D / 8][4];
#pragma unroll
	for (int n = 0; n < FA_D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	const int wfirst = pos0 + q0 + 16 * w;       // position of this warp's first row
	const int p0 = wfirst + g, p1 = p0 + 8;      // positions of this thread's two rows

	for (int kt = 0; kt < nkt; kt++) {
		cp_async_wait<0>();
		__syncthreads(); // tile kt landed; tile kt-1's buffer is free
		if (kt + 1 < nkt)
			load_kv((kt + 1) * BN, (kt + 1) & 1);
		cp_async_commit();
		const int kpos = kt * BN;
		// Every key of the tile comes after every row of this warp: nothing
		// to add. Tile 0 is never skipped, so each row's max is finite after it.
		if (kpos > wfirst + 15)
			continue;
		const bf16_t *Kt = Ks + (kt & 1) * BN * FA_LD, *Vt = Vs + (kt & 1) * BN * FA_LD;

		// S = Q Kᵀ for this warp's 16 rows and the BN keys.
		float s[BN / 8][4];
#pragma unroll
		for (int n = 0; n < BN / 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
		const int qr = lane & 7, qq = lane >> 3;
#pragma unroll
		for (int kk = 0; kk < FA_D / 16; kk++) {
			unsigned a[4];
			ldsm_x4(a, Qs + (16 * w + qr + 8 * (qq & 1)) * FA_LD + 16 * kk + 8 * (qq >> 1));
#pragma unroll
			for (int np = 0; np < BN / 16; np++) {
				unsigned b[4];
				ldsm_x4(b, Kt + (16 * np + qr + 8 * (qq >> 1)) * FA_LD + 16 * kk + 8 * (qq & 1));
				mma_bf16(s[2 * np], a, b);
				mma_bf16(s[2 * np + 1], a, b + 2);
			}
		}
		// The online softmax in base 2 with O's rescale (flash_common.cuh).
		unsigned pa[BN / 16][4];
		float c0, c1;
		fa_softmax_tile<BN, FA_D>(&s[0][0], kpos, wfirst, p0, p1, c, scale_log2, m0, m1, l0, l1, c0, c1, pa,
		                          &o[0][0]);
		// O += P V: V tile is [key][d] = B row-major, read with ldmatrix.trans.
#pragma unroll
		for (int kk = 0; kk < BN / 16; kk++) {
#pragma unroll
			for (int np = 0; np < FA_D / 16; np++) {
				unsigned b[4];
				ldb_frag_trans_x2(b, Vt + (16 * kk) * FA_LD + 16 * np, FA_LD, lane);
				mma_bf16(o[2 * np], pa[kk], b);
				mma_bf16(o[2 * np + 1], pa[kk], b + 2);
			}
		}
	}
	cp_async_wait<0>();
	// Epilogue: y = (O / l) ⊙ σ(gate), bf16, rows of nh·D.
	fa_store_gated<FA_D>(y, gate, ldg, &o[0][0], l0, l1, q0 + 16 * w + g, T, h, nh, c);
}

// The launch shapes, named 100·warps + key tile. Each is set up at init when
// the device's per-block shared memory holds it; the default is the fastest
// measured shape this device runs (docs/perf-cuda-kernels.md): the warpgroup
// shape 2064 on sm_90 (flash_attn_wg.cu), else 864 where 203 KB fit
// (sm_100), else 432 (99 KB, the sm_120 limit).
struct FaShape {
	int name, nw, bn, smem;
	const void *fn;
	bool ok;
};
static FaShape g_fa_shapes[] = {
    {432, 4, 32, fa_smem(4, 32), (const void *)k_flash_attn<4, 32, 2>, false},
    {464, 4, 64, fa_smem(4, 64), (const void *)k_flash_attn<4, 64, 1>, false},
    {832, 8, 32, fa_smem(8, 32), (const void *)k_flash_attn<8, 32, 1>, false},
    {864, 8, 64, fa_smem(8, 64), (const void *)k_flash_attn<8, 64, 1>, false},
};
static const int g_fa_preferred[] = {864, 432};
static int g_fa_default = 432;
int g_fa_variant = 0; // bench's choice of shape (0: the default)

// flash_attn_wg.cu: the warpgroup-MMA shapes (named 1000·warpgroups + key
// tile), the default where the device runs them.
int qr_flash_attn_wg_init(int want, bool *ready);
int launch_flash_attn_wg(int name, bool *took, bf16_t *y, const bf16_t *q, const bf16_t *kc, const bf16_t *vc,
                         const bf16_t *gate, int ldg, int t, int pos0, int nh, int nkv, float scale_log2,
                         cudaStream_t st);
static const int g_fw_default = 2064;

int qr_flash_attn_init() {
	bool wg = false;
	QR_TRY(qr_flash_attn_wg_init(g_fw_default, &wg));
	int optin = 0;
	QR_CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g_qr.device));
	for (FaShape &s : g_fa_shapes) {
		s.ok = s.smem <= optin;
		if (s.ok)
			QR_CK(cudaFuncSetAttribute(s.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, s.smem));
	}
	if (wg) {
		g_fa_default = g_fw_default;
		return QR_OK;
	}
	for (int name : g_fa_preferred)
		for (const FaShape &s : g_fa_shapes)
			if (s.name == name && s.ok) {
				g_fa_default = name;
				return QR_OK;
			}
	QR_ARG(g_fa_shapes[0].ok, "flash attention: %d bytes of shared memory per block, %d needed", optin,
	       g_fa_shapes[0].smem);
	g_fa_default = g_fa_shapes[0].name;
	return QR_OK;
}

// y [T, nh·256] = gated causal attention of q [T, nh, 256] (rows at
// positions pos0..pos0+T-1) over the cache kc/vc [pos0+T, nkv, 256]; the
// gate of (t, h) sits at gate + t·ldg + h·512 (the q_proj layout).
int launch_flash_attn(bf16_t *y, const bf16_t *q, const bf16_t *kc, const bf16_t *vc, const bf16_t *gate, int ldg,
                      int t, int pos0, int nh, int nkv, int hd, float scale, cudaStream_t st) {
	QR_ARG(hd == FA_D, "flash attention: head dim %d (built for %d)", hd, FA_D);
	QR_ARG(nh % nkv == 0 && ldg % 2 == 0, "flash attention: nh %% nkv or gate stride");
	if (t == 0)
		return QR_OK;
	const int want = g_fa_variant ? g_fa_variant : g_fa_default;
	float sl2 = scale * 1.4426950408889634f;
	bool took = false;
	QR_TRY(launch_flash_attn_wg(want, &took, y, q, kc, vc, gate, ldg, t, pos0, nh, nkv, sl2, st));
	if (took)
		return QR_OK;
	const FaShape *sh = nullptr;
	for (const FaShape &s : g_fa_shapes)
		if (s.name == want)
			sh = &s;
	QR_ARG(sh != nullptr && sh->ok, "flash attention: shape %d not built or too large for this device", want);
	void *args[] = {&y, &q, &kc, &vc, &gate, &ldg, &t, &pos0, &nh, &nkv, &sl2};
	QR_CK(cudaLaunchKernel(sh->fn, dim3(cdiv(t, 16 * sh->nw), nh), dim3(32 * sh->nw), args, sh->smem, st));
	return QR_OK;
}

// The flash attention on host data, for its check against the CPU: q
// [t, nh, 256] at positions pos0.., k and v [pos0 + t, nkv, 256], gate
// [t, nh, 256]; out [t, nh, 256] = attention · σ(gate), bf16-rounded like
// the inputs. variant 0 is the default shape, else a shape's name.
extern "C" int qr_flash_attention(float *out, const float *q, const float *k, const float *v, const float *gate,
                                  int t, int pos0, int nh, int nkv, int variant) {
	QR_TRY(qr_require());
	QR_ARG(out && q && k && v && gate && t >= 1 && pos0 >= 0 && nh > 0 && nkv > 0 && nh % nkv == 0,
	       "qr_flash_attention: bad arguments (t=%d pos0=%d nh=%d nkv=%d)", t, pos0, nh, nkv);
	cudaStream_t st = g_qr.stream;
	const size_t nq = (size_t)t * nh * FA_D, nk = (size_t)(pos0 + t) * nkv * FA_D;
	DevBuf bq, bk, bv, bg, by, fy;
	QR_TRY(upload_attn_inputs(bq, bk, bv, bg, q, nq, k, v, nk, gate, (size_t)t * nh));
	QR_TRY(by.alloc(nq * 2));
	QR_TRY(qr_fill_nan(by.p, nq * 2, st));
	struct Restore {
		~Restore() { g_fa_variant = 0; }
	} restore;
	g_fa_variant = variant;
	QR_TRY(launch_flash_attn(by.as<bf16_t>(), bq.as<bf16_t>(), bk.as<bf16_t>(), bv.as<bf16_t>(), bg.as<bf16_t>() + FA_D,
	                         2 * nh * FA_D, t, pos0, nh, nkv, FA_D, 1.0f / 16.0f, st));
	QR_TRY(fy.alloc(nq * 4));
	QR_TRY(qr_convert_bf16_f32(fy.as<float>(), by.as<bf16_t>(), nq, st));
	QR_CK(cudaStreamSynchronize(st));
	return download(out, fy, nq);
}
