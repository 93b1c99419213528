// moe.cu: the sparse mixture-of-experts MLP of qwen3_5_moe and Qwen3-Next
// on the device (layers/moe/doc in moe.go has the math):
//
//	p       = softmax(x W_routerᵀ)           fp32, over the E experts
//	S, w    = top-k of p                     ties to the lower expert index
//	w       ← w / Σw                          when norm_topk
//	experts = Σ_{e∈S} w_e · W_down,e (SiLU(W_gate,e x) ⊙ W_up,e x)
//	out     = experts + σ(x w_sgᵀ) · SharedMLP(x)
//
// The router and the shared expert's gate are one product (w_sg is row E
// of the router matrix). The k·T routed rows are grouped by expert with a
// deterministic counting sort (rank, scan, place), and each projection of
// every expert is one grouped GEMM launch over all of them: a block takes
// one MOE_BM-row tile of one expert's rows, found from the scan's tile starts
// on the device, so nothing waits for the host. The gate/up GEMM applies
// SwiGLU in its epilogue; the combine adds the weighted expert rows, the
// gated shared expert and the residual in one pass. The decode step (one
// token, captured in a CUDA graph) skips the sort: its k experts are
// gathered GEMVs that read the chosen ids on the device (moe_decode.cu),
// and its shared expert runs on a side stream beside them (a batch of rows
// gathers its shared experts too). The router itself is moe_route.cu's.
#include <math.h>

#include "model.cuh"

// ---- grouping the routed rows by expert ----

// Block e: the rank of each routed slot of expert e among that expert's
// slots, in slot order (so the grouping is deterministic), and their count.
// Each thread counts a contiguous run of slots (a multiple of 4, read as
// int4), a block scan of the counts gives each run its first rank, and a
// second pass hands them out.
__global__ void __launch_bounds__(256) k_moe_rank(const int32_t *__restrict__ ids, int n, int32_t *__restrict__ rank,
                                                  int32_t *__restrict__ cnt) {
	__shared__ int wsum[8];
	const int e = blockIdx.x, tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int per = ((n + 255) / 256 + 3) & ~3, lo = min(n, tid * per), hi = min(n, lo + per);
	int c = 0, s = lo;
	for (; s + 4 <= hi; s += 4) { // lo is a multiple of 4: aligned
		const int4 q = *(const int4 *)(ids + s);
		c += (q.x == e) + (q.y == e) + (q.z == e) + (q.w == e);
	}
	for (; s < hi; s++)
		c += ids[s] == e;
	int inc = c; // inclusive scan over the warp, then the warps' totals
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const int a = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += a;
	}
	if (lane == 31)
		wsum[wid] = inc;
	__syncthreads();
	int r = inc - c;
	for (int q = 0; q < wid; q++)
		r += wsum[q];
	s = c ? lo : hi; // a run without expert e's slots has nothing to hand out
	for (; s + 4 <= hi; s += 4) {
		const int4 q = *(const int4 *)(ids + s);
		if (q.x == e)
			rank[s] = r++;
		if (q.y == e)
			rank[s + 1] = r++;
		if (q.z == e)
			rank[s + 2] = r++;
		if (q.w == e)
			rank[s + 3] = r++;
	}
	for (; s < hi; s++)
		if (ids[s] == e)
			rank[s] = r++;
	if (tid == 255)
		cnt[e] = r;
}

// One block: off[e] = Σ_{e'<e} cnt[e'] (off[E] = all rows) and tiles[e] =
// Σ_{e'<e} ⌈cnt[e']/MOE_BM⌉ (tiles[E] = all tiles of the grouped GEMMs).
__global__ void __launch_bounds__(1024) k_moe_scan(const int32_t *__restrict__ cnt, int E, int32_t *__restrict__ off,
                                                   int32_t *__restrict__ tiles) {
	__shared__ int ws_r[32], ws_t[32];
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int per = (E + blockDim.x - 1) / blockDim.x, lo = min(E, tid * per), hi = min(E, lo + per);
	int r = 0, tl = 0;
	for (int e = lo; e < hi; e++) {
		r += cnt[e];
		tl += (cnt[e] + MOE_BM - 1) / MOE_BM;
	}
	// Inclusive scan over the warp, then over the warps' totals.
	int ir = r, it = tl;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const int a = __shfl_up_sync(0xffffffffu, ir, o), b = __shfl_up_sync(0xffffffffu, it, o);
		if (lane >= o)
			ir += a, it += b;
	}
	if (lane == 31)
		ws_r[wid] = ir, ws_t[wid] = it;
	__syncthreads();
	if (wid == 0) {
		const int nw = blockDim.x >> 5;
		int a = lane < nw ? ws_r[lane] : 0, b = lane < nw ? ws_t[lane] : 0;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) {
			const int x = __shfl_up_sync(0xffffffffu, a, o), y = __shfl_up_sync(0xffffffffu, b, o);
			if (lane >= o)
				a += x, b += y;
		}
		if (lane < nw)
			ws_r[lane] = a, ws_t[lane] = b;
	}
	__syncthreads();
	int er = ir - r + (wid ? ws_r[wid - 1] : 0), et = it - tl + (wid ? ws_t[wid - 1] : 0);
	for (int e = lo; e < hi; e++) {
		off[e] = er;
		tiles[e] = et;
		er += cnt[e];
		et += (cnt[e] + MOE_BM - 1) / MOE_BM;
	}
	if (tid == blockDim.x - 1) {
		off[E] = er;
		tiles[E] = et;
	}
}

// pos[s] = the grouped row of slot s; perm[row] = s.
__global__ void k_moe_place(const int32_t *__restrict__ ids, const int32_t *__restrict__ rank,
                            const int32_t *__restrict__ off, int n, int32_t *__restrict__ pos,
                            int32_t *__restrict__ perm) {
	for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < n; s += gridDim.x * blockDim.x) {
		const int r = off[ids[s]] + rank[s];
		pos[s] = r;
		perm[r] = s;
	}
}

// ---- grouped GEMM (bf16 mma.sync, fp32 accumulators) ----
//
// C[r, :] = A[src(r), :] · W_e(r)ᵀ over the grouped rows r, W_e = W + e·n_w·K
// ([n_w, K] row-major). Block (x, y): tile x of the scan's tile list (an
// expert's MOE_BM rows), output columns y·64… (GATEUP) or y·128… (DOWN).
//  GATEUP: A rows are XN[perm[r] / k]; W_e = [gate (I rows) | up (I rows)];
//          out bf16 [rows, I] = bf16(SiLU(bf16(g)) · bf16(u)).
//  DOWN:   A rows are act[r]; W_e = [H, I]; out bf16 [rows, H].
// Tiles: 128 rows × 128 weight rows × 64 of K in a 3-stage cp.async
// pipeline (110 KB of dynamic shared memory, two blocks per SM; 2 stages,
// 74 KB, where a block may have less, as on sm_120); 8 warps of
// 32 × 64 (4 along the rows, 2 along the columns), fragments by ldmatrix. A GATEUP block's 128 weight rows are 64 gate rows
// and the 64 up rows of the same outputs, so each thread holds g and u of
// its outputs. K % 8 == 0.
#define MOE_BK 64
#define MOE_LDS (MOE_BK + 8) // smem row stride: 144 bytes, conflict-free ldmatrix rows
#define MOE_GEMM_SMEM(stages) ((stages) * (MOE_BM + 128) * MOE_LDS * 2)

__device__ __forceinline__ void moe_ldsm_x4(unsigned r[4], const bf16_t *p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(smem_addr(p)));
}

template <int MODE, int MOE_STAGES>
__global__ void __launch_bounds__(256)
    k_moe_gemm(void *__restrict__ out, const bf16_t *__restrict__ A, const bf16_t *__restrict__ W,
               const int32_t *__restrict__ perm, int topk, const int32_t *__restrict__ off,
               const int32_t *__restrict__ tiles, int E, int N, int K) {
	extern __shared__ __align__(16) unsigned char moe_smem[];
	bf16_t(*As)[MOE_BM][MOE_LDS] = (bf16_t(*)[MOE_BM][MOE_LDS])moe_smem;
	bf16_t(*Ws)[128][MOE_LDS] = (bf16_t(*)[128][MOE_LDS])(moe_smem + MOE_STAGES * MOE_BM * MOE_LDS * 2);
	const int b = blockIdx.x;
	if (b >= tiles[E])
		return;
	int lo = 0, hi = E; // the expert e with tiles[e] <= b < tiles[e+1]
	while (hi - lo > 1) {
		const int mid = (lo + hi) >> 1;
		if (tiles[mid] <= b)
			lo = mid;
		else
			hi = mid;
	}
	const int e = lo;
	const int row0 = off[e] + (b - tiles[e]) * MOE_BM, rend = off[e + 1];
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
	const int n0 = blockIdx.y * (MODE == MOE_GATEUP ? 64 : 128);
	const size_t wrows = MODE == MOE_GATEUP ? 2 * (size_t)N : (size_t)N;
	const bf16_t *We = W + (size_t)e * wrows * K;
	// This thread's A and W chunks per stage: rows tid/8 + 32·i, 8 of K at (tid%8)·8.
	const int crow = tid >> 3, kc = (tid & 7) * 8;
	const bf16_t *arow[4], *wrow[4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int r = crow + 32 * i, gr = row0 + r;
		arow[i] = nullptr;
		if (gr < rend)
			arow[i] = MODE == MOE_GATEUP ? A + (size_t)(perm[gr] / topk) * K : A + (size_t)gr * K;
		int src = -1;
		if (MODE == MOE_GATEUP) {
			const int c = n0 + (r & 63);
			if (c < N)
				src = r < 64 ? c : N + c;
		} else if (n0 + r < N) {
			src = n0 + r;
		}
		wrow[i] = src >= 0 ? We + (size_t)src * K : nullptr;
	}
	auto load = [&](int buf, int k0) {
		const bool kin = k0 + kc < K;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			bf16_t *da = &As[buf][crow + 32 * i][kc], *dw = &Ws[buf][crow + 32 * i][kc];
			if (arow[i] && kin)
				cp_async16(da, arow[i] + k0 + kc);
			else
				*(uint4 *)da = make_uint4(0, 0, 0, 0);
			if (wrow[i] && kin)
				cp_async16(dw, wrow[i] + k0 + kc);
			else
				*(uint4 *)dw = make_uint4(0, 0, 0, 0);
		}
		cp_async_commit();
	};
	float acc[2][8][4];
#pragma unroll
	for (int mi = 0; mi < 2; mi++)
#pragma unroll
		for (int ni = 0; ni < 8; ni++)
#pragma unroll
			for (int q = 0; q < 4; q++)
				acc[mi][ni][q] = 0.0f;
	// The warp's four pairs of n8 tiles: their first row in Ws.
	int wr[4];
#pragma unroll
	for (int np = 0; np < 4; np++)
		wr[np] = MODE == MOE_GATEUP ? (np < 2 ? wn * 32 + 16 * np : 64 + wn * 32 + 16 * (np - 2)) : wn * 64 + 16 * np;
	// ldmatrix lane addresses: A rows lane%16 at k + (lane/16)·8; W rows
	// (lane%8) + (lane/16)·8 at k + ((lane/8)%2)·8.
	const int a_r = lane & 15, a_k = (lane >> 4) * 8;
	const int b_r = (lane & 7) + ((lane >> 4) << 3), b_k = ((lane >> 3) & 1) * 8;
	const int nk = (K + MOE_BK - 1) / MOE_BK;
#pragma unroll
	for (int st = 0; st < MOE_STAGES - 1; st++) { // a group per stage, empty past K, so the waits count alike
		if (st < nk)
			load(st, st * MOE_BK);
		else
			cp_async_commit();
	}
	for (int kt = 0; kt < nk; kt++) {
		const int buf = kt % MOE_STAGES;
		cp_async_wait<MOE_STAGES - 2>();
		__syncthreads(); // stage kt landed for every thread; stage kt−1's buffer is free
		if (kt + MOE_STAGES - 1 < nk)
			load((kt + MOE_STAGES - 1) % MOE_STAGES, (kt + MOE_STAGES - 1) * MOE_BK);
		else
			cp_async_commit();
#pragma unroll
		for (int ks = 0; ks < MOE_BK; ks += 16) {
			unsigned a[2][4];
#pragma unroll
			for (int mi = 0; mi < 2; mi++)
				moe_ldsm_x4(a[mi], &As[buf][wm * 32 + 16 * mi + a_r][ks + a_k]);
#pragma unroll
			for (int np = 0; np < 4; np++) {
				unsigned bb[4];
				moe_ldsm_x4(bb, &Ws[buf][wr[np] + b_r][ks + b_k]);
#pragma unroll
				for (int mi = 0; mi < 2; mi++) {
					mma_bf16(acc[mi][2 * np], a[mi], bb);
					mma_bf16(acc[mi][2 * np + 1], a[mi], bb + 2);
				}
			}
		}
	}
	const int g = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
	for (int mi = 0; mi < 2; mi++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int r = row0 + wm * 32 + 16 * mi + g + 8 * h;
			if (r >= rend)
				continue;
			if (MODE == MOE_GATEUP) {
				bf16_t *o = (bf16_t *)out + (size_t)r * N;
#pragma unroll
				for (int ni = 0; ni < 4; ni++) {
					const int col = n0 + wn * 32 + 8 * ni + c2;
#pragma unroll
					for (int q = 0; q < 2; q++)
						if (col + q < N) {
							const float gv = bf2f(f2bf(acc[mi][ni][2 * h + q]));
							const float uv = bf2f(f2bf(acc[mi][ni + 4][2 * h + q]));
							o[col + q] = f2bf(silu(gv) * uv);
						}
				}
			} else {
				bf16_t *o = (bf16_t *)out + (size_t)r * N;
#pragma unroll
				for (int ni = 0; ni < 8; ni++) {
					const int col = n0 + wn * 64 + 8 * ni + c2;
					if (col + 1 < N) // N % 8 == 0 in practice: both columns, one 4-byte store
						*(unsigned *)(o + col) = pack_bf2(acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
					else if (col < N)
						o[col] = f2bf(acc[mi][ni][2 * h]);
				}
			}
		}
}

// X[t] += Σ_j w[t, j] · Y[pos[t·k + j]] + σ(gate logit) · S[t] (pos null:
// slot t·k + j is row t·k + j, as decode leaves them); eo and mo (tracing;
// may be null) get the routed sum and the whole MLP output.
// Block (t, y): token t, columns y·256 + thread, + gridDim.y·256, …: a
// prefill takes one block per token, decode's one token spreads over H/256.
template <typename TY>
__global__ void __launch_bounds__(256)
    k_moe_combine(float *__restrict__ X, const TY *__restrict__ Y, const int32_t *__restrict__ pos,
                  const float *__restrict__ w, const float *__restrict__ S, const float *__restrict__ gate_logit,
                  int ldg, int H, int k, float *__restrict__ eo, float *__restrict__ mo) {
	pdl_trigger();
	pdl_wait(); // every input is a kernel before's output
	const int t = blockIdx.x;
	const float sg = 1.0f / (1.0f + expf(-gate_logit[(size_t)t * ldg]));
	for (int h = blockIdx.y * 256 + threadIdx.x; h < H; h += gridDim.y * 256) {
		float acc = 0;
#pragma unroll 8 // the k rows' loads in flight together (a sum in the same order)
		for (int j = 0; j < k; j++)
			acc += w[(size_t)t * k + j] * ldf(Y + (size_t)(pos ? pos[(size_t)t * k + j] : t * k + j) * H + h);
		const float m = acc + sg * S[(size_t)t * H + h];
		X[(size_t)t * H + h] += m;
		if (eo)
			eo[(size_t)t * H + h] = acc;
		if (mo)
			mo[(size_t)t * H + h] = m;
	}
}

// ---- the block's MLP ----

int launch_moe_group(MoeActs &A, int n, int E, cudaStream_t st) {
	k_moe_rank<<<E, 256, 0, st>>>(A.ids.as<int32_t>(), n, A.rank.as<int32_t>(), A.cnt.as<int32_t>());
	QR_CKL("moe_rank");
	k_moe_scan<<<1, 1024, 0, st>>>(A.cnt.as<int32_t>(), E, A.off.as<int32_t>(), A.tiles.as<int32_t>());
	QR_CKL("moe_scan");
	k_moe_place<<<cdiv(n, 256), 256, 0, st>>>(A.ids.as<int32_t>(), A.rank.as<int32_t>(), A.off.as<int32_t>(), n,
	                                         A.pos.as<int32_t>(), A.perm.as<int32_t>());
	QR_CKL("moe_place");
	return QR_OK;
}

int launch_moe_combine_f32(float *X, const float *Y, const int32_t *pos, const float *w, const float *S,
                           const float *gate_logit, int ldg, int T, int H, int k, float *eo, float *mo,
                           cudaStream_t st) {
	return launch_pdl(k_moe_combine<float>, dim3(T, 1), dim3(256), 0, st, X, Y, pos, w, S, gate_logit, ldg, H, k, eo,
	                  mo);
}

int MoeActs::alloc(const qr_model_dims &d, int T, size_t &bytes) {
	const size_t n = (size_t)T * d.topk, H = d.hidden, es = d.f32 ? 4 : 2;
	DevBuf *b[12] = {&logits, &ids, &w, &idf, &rank, &pos, &perm, &cnt, &off, &tiles, &act, &y};
	const size_t sz[12] = {(size_t)T * moe_router_rows(d.experts) * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       (size_t)d.experts * 4,
	                       (size_t)(d.experts + 1) * 4,
	                       (size_t)(d.experts + 1) * 4,
	                       n * d.moe_inter * es,
	                       n * H * es};
	DevBuf *b2[4] = {&shared_act, &shared_out, &gu, &topq};
	const size_t sz2[4] = {(size_t)T * d.shared_inter * es, (size_t)T * H * 4,
	                       d.f32 ? n * 2 * d.moe_inter * 4 : 0, d.f32 ? (size_t)T * d.experts * 8 : 0};
	for (int i = 0; i < 16; i++) {
		DevBuf *p = i < 12 ? b[i] : b2[i - 12];
		const size_t bs = i < 12 ? sz[i] : sz2[i - 12];
		if (p->p) {
			QR_CK(cudaFree(p->p));
			p->p = nullptr;
		}
		if (bs == 0)
			continue;
		QR_TRY(p->alloc(bs));
		bytes += bs;
	}
	return QR_OK;
}

// The two grouped GEMMs: gate/up with SwiGLU into act [n, I], then down
// into y [n, H]; 3 pipeline stages where the GPU gives a block the shared
// memory, else 2.
static int moe_gemm_launch(unsigned max_tiles, void *act, const bf16_t *XN, const bf16_t *gate_up, const bf16_t *down,
                           void *y, const int32_t *perm, int k, const int32_t *off, const int32_t *tiles, int E, int I,
                           int H, cudaStream_t st) {
	static int stages = 0; // chosen, and the kernels' shared-memory limit raised, once per process
	if (!stages) {
		int optin = 0;
		QR_CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g_qr.device));
		const int s = optin >= MOE_GEMM_SMEM(3) ? 3 : 2;
		QR_ARG(optin >= MOE_GEMM_SMEM(2), "moe: the grouped GEMM needs %d bytes of shared memory per block, this GPU "
		                                  "gives %d", MOE_GEMM_SMEM(2), optin);
		if (s == 3) {
			QR_CK(cudaFuncSetAttribute(k_moe_gemm<MOE_GATEUP, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_GEMM_SMEM(3)));
			QR_CK(cudaFuncSetAttribute(k_moe_gemm<MOE_DOWN, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_GEMM_SMEM(3)));
		} else {
			QR_CK(cudaFuncSetAttribute(k_moe_gemm<MOE_GATEUP, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_GEMM_SMEM(2)));
			QR_CK(cudaFuncSetAttribute(k_moe_gemm<MOE_DOWN, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_GEMM_SMEM(2)));
		}
		stages = s;
	}
	auto gu = stages == 3 ? k_moe_gemm<MOE_GATEUP, 3> : k_moe_gemm<MOE_GATEUP, 2>;
	auto dn = stages == 3 ? k_moe_gemm<MOE_DOWN, 3> : k_moe_gemm<MOE_DOWN, 2>;
	gu<<<dim3(max_tiles, cdiv(I, 64)), 256, MOE_GEMM_SMEM(stages), st>>>(act, XN, gate_up, perm, k, off, tiles, E, I, H);
	QR_CKL("moe_gemm_gateup");
	dn<<<dim3(max_tiles, cdiv(H, 128)), 256, MOE_GEMM_SMEM(stages), st>>>(y, (const bf16_t *)act, down, nullptr, k, off,
	                                                                        tiles, E, H, I);
	QR_CKL("moe_gemm_down");
	return QR_OK;
}

// The one-row decode's shared expert on the side stream, beside the router
// and the routed experts on st (their launches wait on each other, so
// running it apart takes a ninth of the gathered GEMVs' rows off that
// chain): its gate/up GEMV with SwiGLU on XN, then its down GEMV into
// shared_out, the same sums as its gathered slot. The combine waits for
// ev_join.
int DevModel::shared_expert_side(const MoeW &M, int shape, cudaStream_t st) {
	if (!side) {
		QR_CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
		QR_CK(cudaEventCreateWithFlags(&ev_fork, cudaEventDisableTiming));
		QR_CK(cudaEventCreateWithFlags(&ev_join, cudaEventDisableTiming));
	}
	const int H = d.hidden, Is = d.shared_inter;
	QR_CK(cudaEventRecord(ev_fork, st)); // XN is ready
	QR_CK(cudaStreamWaitEvent(side, ev_fork, 0));
	QR_TRY(launch_gemv(GEMV_Y_SWIGLU, macts.shared_act.p, xn.as<bf16_t>(), M.shared_gu.as<bf16_t>(), 2 * Is, H, side,
	                   shape));
	QR_TRY(launch_gemv(GEMV_Y_F32, macts.shared_out.p, macts.shared_act.as<bf16_t>(), M.shared_down.as<bf16_t>(), H,
	                   Is, side, shape));
	QR_CK(cudaEventRecord(ev_join, side));
	return QR_OK;
}

int DevModel::moe_step(const PlanStep &s, int T, int decode, cudaStream_t st) {
	MoeW &M = *blocks[s.layer]->moe;
	MoeActs &A = macts;
	const int H = d.hidden, E = d.experts, k = d.topk, I = d.moe_inter, Is = d.shared_inter;
	const int n = T * k;
	const int RR = moe_router_rows(E);
	float *X = x.as<float>();
	bf16_t *XN = xn.as<bf16_t>();
	float *RL = A.logits.as<float>();
	float *SO = A.shared_out.as<float>();
	switch (s.op) {
	case QR_OP_MOE_ROUTE:
		if (decode && T == 1) {
			QR_TRY(shared_expert_side(M, s.arg, st));
			QR_TRY(launch_gemv(GEMV_Y_F32, RL, XN, M.router.as<bf16_t>(), RR, H, st, s.arg));
		} else
			QR_TRY(qr_gemm_bf16(RL, 1, RR, XN, H, M.router.as<bf16_t>(), H, T, RR, H, st));
		QR_TRY(launch_moe_route(RL, RR, T, E, k, d.norm_topk, A.ids.as<int32_t>(), A.w.as<float>(),
		                        trace ? A.idf.as<float>() : nullptr, st));
		return QR_OK;
	case QR_OP_MOE_EXPERTS: {
		if (decode) { // a batch's shared experts ride along as slots n … n + T − 1
			const MoeDecodeArgs da{&A, &M, XN, n, T, k, H, I, Is, T == 1 ? 0 : T};
			return launch_moe_decode_gemvs(s.arg, da, st);
		}
		QR_TRY(mark(ST_MOE_ROUTE, st)); // the grouping counts with the router
		QR_TRY(launch_moe_group(A, n, E, st));
		QR_TRY(mark(ST_MOE_EXPERTS, st));
		const unsigned max_tiles = moe_max_tiles(n, E);
		return moe_gemm_launch(max_tiles, A.act.p, XN, M.gate_up.as<bf16_t>(), M.down.as<bf16_t>(), A.y.p,
		                       A.perm.as<int32_t>(), k, A.off.as<int32_t>(), A.tiles.as<int32_t>(), E, I, H, st);
	}
	case QR_OP_MOE_SHARED:
		if (decode) // with the router (one row) or the routed experts (a batch)
			return QR_OK;
		QR_TRY(qr_gemm_bf16(big.p, 0, 2 * Is, XN, H, M.shared_gu.as<bf16_t>(), H, T, 2 * Is, H, st));
		QR_TRY(launch_swiglu_rows(A.shared_act.as<bf16_t>(), big.as<bf16_t>(), T, Is, st));
		return qr_gemm_bf16(SO, 1, H, A.shared_act.as<bf16_t>(), Is, M.shared_down.as<bf16_t>(), Is, T, H, Is, st);
	case QR_OP_MOE_COMBINE: {
		float *eo, *mo; // the routed sum and the whole output, for the trace
		QR_TRY(trace_scratch(T, &eo, &mo));
		if (decode && T == 1) // the shared expert's output, from the side stream
			QR_CK(cudaStreamWaitEvent(st, ev_join, 0));
		QR_TRY(launch_pdl(k_moe_combine<bf16_t>, dim3(T, decode ? cdiv(H, 256) : 1), dim3(256), 0, st, X,
		                  A.y.as<const bf16_t>(), decode ? (const int32_t *)nullptr : A.pos.as<const int32_t>(),
		                  A.w.as<const float>(), (const float *)SO, (const float *)(RL + E), RR, H, k, eo, mo));
		return QR_OK;
	}
	}
	QR_ARG(false, "moe: op %d is not an MoE op", s.op);
	return QR_EARG;
}
