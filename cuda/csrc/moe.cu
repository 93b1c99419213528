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
// one 64-row tile of one expert's rows, found from the scan's tile starts
// on the device, so nothing waits for the host and the same kernels serve
// the prefill and the graph-captured decode step. The gate/up GEMM applies
// SwiGLU in its epilogue; the combine adds the weighted expert rows, the
// gated shared expert and the residual in one pass.
#include <math.h>

#include "model.cuh"

// ---- routing ----

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

// One block per token: p = softmax(logits[t, 0:E]) in fp32, its k largest
// in descending order, renormalised when norm. ids/w [T, k]; idf (may be
// null) gets the ids as floats for tracing.
__global__ void __launch_bounds__(256) k_moe_route(const float *__restrict__ logits, int ld, int E, int k, int norm,
                                                   int32_t *__restrict__ ids, float *__restrict__ w,
                                                   float *__restrict__ idf) {
	__shared__ unsigned char taken[MOE_MAX_EXPERTS];
	__shared__ float red_v[32];
	__shared__ int red_i[32];
	__shared__ float chosen_w[MOE_MAX_TOPK];
	__shared__ int chosen_i[MOE_MAX_TOPK];
	const int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = blockDim.x >> 5;
	const float *l = logits + (size_t)t * ld;
	float m = -INFINITY;
	for (int i = tid; i < E; i += blockDim.x) {
		m = fmaxf(m, l[i]);
		taken[i] = 0;
	}
	m = warp_max(m);
	if (lane == 0)
		red_v[wid] = m;
	__syncthreads();
	m = red_v[0];
	for (int j = 1; j < nw; j++)
		m = fmaxf(m, red_v[j]);
	__syncthreads();
	float s = 0;
	for (int i = tid; i < E; i += blockDim.x)
		s += expf(l[i] - m);
	s = warp_sum(s);
	if (lane == 0)
		red_v[wid] = s;
	__syncthreads();
	s = 0;
	for (int j = 0; j < nw; j++)
		s += red_v[j];
	__syncthreads();
	for (int j = 0; j < k; j++) {
		float bv = -INFINITY;
		int bi = 0x7fffffff;
		for (int i = tid; i < E; i += blockDim.x) {
			if (taken[i])
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
		if (lane == 0)
			red_v[wid] = bv, red_i[wid] = bi;
		__syncthreads();
		if (tid == 0) {
			for (int q = 1; q < nw; q++)
				if (route_better(red_v[q], red_i[q], bv, bi))
					bv = red_v[q], bi = red_i[q];
			if (bi < 0 || bi >= E) // every value compared false: take the first free expert
				for (bi = 0; taken[bi]; bi++) {
				}
			taken[bi] = 1;
			chosen_i[j] = bi;
			chosen_w[j] = bv;
		}
		__syncthreads();
	}
	if (tid == 0) {
		float sum = 0;
		for (int j = 0; j < k; j++)
			sum += chosen_w[j];
		for (int j = 0; j < k; j++) {
			ids[(size_t)t * k + j] = chosen_i[j];
			w[(size_t)t * k + j] = norm ? chosen_w[j] / sum : chosen_w[j];
			if (idf)
				idf[(size_t)t * k + j] = (float)chosen_i[j];
		}
	}
}

// Block e: the rank of each routed slot of expert e among that expert's
// slots, in slot order (so the grouping is deterministic), and their count.
__global__ void __launch_bounds__(256) k_moe_rank(const int32_t *__restrict__ ids, int n, int32_t *__restrict__ rank,
                                                  int32_t *__restrict__ cnt) {
	__shared__ int wsum[8];
	const int e = blockIdx.x, tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	int running = 0;
	for (int base = 0; base < n; base += 256) {
		const int s = base + tid;
		const bool hit = s < n && ids[s] == e;
		const unsigned b = __ballot_sync(0xffffffffu, hit);
		if (lane == 0)
			wsum[wid] = __popc(b);
		__syncthreads();
		int before = running, total = running;
		for (int q = 0; q < 8; q++) {
			if (q < wid)
				before += wsum[q];
			total += wsum[q];
		}
		if (hit)
			rank[s] = before + __popc(b & ((1u << lane) - 1));
		running = total;
		__syncthreads();
	}
	if (tid == 0)
		cnt[e] = running;
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
// expert's 64 rows), output columns y·64… (GATEUP) or y·128… (DOWN).
//  GATEUP: A rows are XN[perm[r] / k]; W_e = [gate (I rows) | up (I rows)];
//          out bf16 [rows, I] = bf16(SiLU(bf16(g)) · bf16(u)).
//  DOWN:   A rows are act[r]; W_e = [H, I]; out fp32 [rows, H].
// Tiles: 64 rows × 128 weight rows × 32 of K, double-buffered with cp.async;
// 4 warps of 32 × 64. K % 8 == 0.
enum { MOE_GATEUP = 0, MOE_DOWN = 1 };
#define MOE_BK 32
#define MOE_LDS (MOE_BK + 8) // smem row stride: 80 bytes, conflict-free fragments

template <int MODE>
__global__ void __launch_bounds__(128)
    k_moe_gemm(void *__restrict__ out, const bf16_t *__restrict__ A, const bf16_t *__restrict__ W,
               const int32_t *__restrict__ perm, int topk, const int32_t *__restrict__ off,
               const int32_t *__restrict__ tiles, int E, int N, int K) {
	__shared__ __align__(16) bf16_t As[2][MOE_BM][MOE_LDS];
	__shared__ __align__(16) bf16_t Ws[2][128][MOE_LDS];
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
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
	const int n0 = blockIdx.y * (MODE == MOE_GATEUP ? 64 : 128);
	const size_t wrows = MODE == MOE_GATEUP ? 2 * (size_t)N : (size_t)N;
	const bf16_t *We = W + (size_t)e * wrows * K;
	// Source rows of this thread's A chunks (fixed over K).
	const bf16_t *arow[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int r = row0 + (tid + 128 * i) / 4;
		arow[i] = nullptr;
		if (r < rend)
			arow[i] = MODE == MOE_GATEUP ? A + (size_t)(perm[r] / topk) * K : A + (size_t)r * K;
	}
	const bf16_t *wrow[4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int r = (tid + 128 * i) / 4;
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
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const int c = tid + 128 * i, r = c / 4, kc = (c & 3) * 8;
			bf16_t *dst = &As[buf][r][kc];
			if (arow[i] && k0 + kc < K)
				cp_async16(dst, arow[i] + k0 + kc);
			else
				*(uint4 *)dst = make_uint4(0, 0, 0, 0);
		}
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int c = tid + 128 * i, r = c / 4, kc = (c & 3) * 8;
			bf16_t *dst = &Ws[buf][r][kc];
			if (wrow[i] && k0 + kc < K)
				cp_async16(dst, wrow[i] + k0 + kc);
			else
				*(uint4 *)dst = make_uint4(0, 0, 0, 0);
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
	// The warp's eight n8 tiles: rows of Ws.
	int wr[8];
#pragma unroll
	for (int ni = 0; ni < 8; ni++)
		wr[ni] = MODE == MOE_GATEUP ? (ni < 4 ? wn * 32 + 8 * ni : 64 + wn * 32 + 8 * (ni - 4)) : wn * 64 + 8 * ni;
	const int nk = (K + MOE_BK - 1) / MOE_BK;
	load(0, 0);
	for (int kt = 0; kt < nk; kt++) {
		const int buf = kt & 1;
		if (kt + 1 < nk) {
			load(buf ^ 1, (kt + 1) * MOE_BK);
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();
#pragma unroll
		for (int ks = 0; ks < MOE_BK; ks += 16) {
			unsigned a[2][4];
#pragma unroll
			for (int mi = 0; mi < 2; mi++)
				lda_frag(a[mi], &As[buf][wm * 32 + 16 * mi][ks], MOE_LDS, lane);
#pragma unroll
			for (int ni = 0; ni < 8; ni++) {
				unsigned bb[2];
				ldb_frag(bb, &Ws[buf][wr[ni]][ks], MOE_LDS, lane);
				mma_bf16(acc[0][ni], a[0], bb);
				mma_bf16(acc[1][ni], a[1], bb);
			}
		}
		__syncthreads();
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
				float *o = (float *)out + (size_t)r * N;
#pragma unroll
				for (int ni = 0; ni < 8; ni++) {
					const int col = n0 + wn * 64 + 8 * ni + c2;
#pragma unroll
					for (int q = 0; q < 2; q++)
						if (col + q < N)
							o[col + q] = acc[mi][ni][2 * h + q];
				}
			}
		}
}

// X[t] += Σ_j w[t, j] · Y[pos[t·k + j]] + σ(gate logit) · S[t]; eo and mo
// (tracing; may be null) get the routed sum and the whole MLP output.
__global__ void k_moe_combine(float *__restrict__ X, const float *__restrict__ Y, const int32_t *__restrict__ pos,
                              const float *__restrict__ w, const float *__restrict__ S,
                              const float *__restrict__ gate_logit, int ldg, int H, int k, float *__restrict__ eo,
                              float *__restrict__ mo) {
	const int t = blockIdx.x;
	const float sg = 1.0f / (1.0f + expf(-gate_logit[(size_t)t * ldg]));
	for (int h = threadIdx.x; h < H; h += blockDim.x) {
		float acc = 0;
		for (int j = 0; j < k; j++)
			acc += w[(size_t)t * k + j] * Y[(size_t)pos[(size_t)t * k + j] * H + h];
		const float m = acc + sg * S[(size_t)t * H + h];
		X[(size_t)t * H + h] += m;
		if (eo)
			eo[(size_t)t * H + h] = acc;
		if (mo)
			mo[(size_t)t * H + h] = m;
	}
}

// ---- the block's MLP ----

int MoeActs::alloc(const qr_model_dims &d, int T, size_t &bytes) {
	const size_t n = (size_t)T * d.topk, H = d.hidden;
	DevBuf *b[12] = {&logits, &ids, &w, &idf, &rank, &pos, &perm, &cnt, &off, &tiles, &act, &y};
	const size_t sz[12] = {(size_t)T * (d.experts + 1) * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       n * 4,
	                       (size_t)d.experts * 4,
	                       (size_t)(d.experts + 1) * 4,
	                       (size_t)(d.experts + 1) * 4,
	                       n * d.moe_inter * 2,
	                       n * H * 4};
	DevBuf *b2[2] = {&shared_act, &shared_out};
	const size_t sz2[2] = {(size_t)T * d.shared_inter * 2, (size_t)T * H * 4};
	for (int i = 0; i < 14; i++) {
		DevBuf *p = i < 12 ? b[i] : b2[i - 12];
		if (p->p) {
			QR_CK(cudaFree(p->p));
			p->p = nullptr;
		}
		QR_TRY(p->alloc(i < 12 ? sz[i] : sz2[i - 12]));
		bytes += i < 12 ? sz[i] : sz2[i - 12];
	}
	return QR_OK;
}

int DevModel::moe_forward(int li, int T, int decode, cudaStream_t st) {
	MoeW &M = *blocks[li]->moe;
	MoeActs &A = macts;
	const int H = d.hidden, E = d.experts, k = d.topk, I = d.moe_inter, Is = d.shared_inter;
	const int n = T * k;
	float *X = x.as<float>();
	bf16_t *XN = xn.as<bf16_t>();
	float *RL = A.logits.as<float>();
	QR_TRY(mark(ST_MOE_ROUTE, st));
	if (decode)
		QR_TRY(launch_gemv(GEMV_Y_F32, RL, XN, M.router.as<bf16_t>(), E + 1, H, st));
	else
		QR_TRY(qr_gemm_bf16(RL, 1, E + 1, XN, H, M.router.as<bf16_t>(), H, T, E + 1, H, st));
	QR_TRY(rec(li, "router_logits", RL, 0, E + 1, T, E, T, E, 0));
	k_moe_route<<<T, 256, 0, st>>>(RL, E + 1, E, k, d.norm_topk, A.ids.as<int32_t>(), A.w.as<float>(),
	                               trace ? A.idf.as<float>() : nullptr);
	QR_CKL("moe_route");
	QR_TRY(rec(li, "router_weights", A.w.p, 0, k, T, k, T, k, 0));
	QR_TRY(rec(li, "router_experts", A.idf.p, 0, k, T, k, T, k, 0));
	k_moe_rank<<<E, 256, 0, st>>>(A.ids.as<int32_t>(), n, A.rank.as<int32_t>(), A.cnt.as<int32_t>());
	QR_CKL("moe_rank");
	k_moe_scan<<<1, 1024, 0, st>>>(A.cnt.as<int32_t>(), E, A.off.as<int32_t>(), A.tiles.as<int32_t>());
	QR_CKL("moe_scan");
	k_moe_place<<<cdiv(n, 256), 256, 0, st>>>(A.ids.as<int32_t>(), A.rank.as<int32_t>(), A.off.as<int32_t>(), n,
	                                         A.pos.as<int32_t>(), A.perm.as<int32_t>());
	QR_CKL("moe_place");
	// Tiles: at most one partial tile per expert that has rows.
	const unsigned max_tiles = cdiv(n, MOE_BM) + (unsigned)(n < E ? n : E);
	QR_TRY(mark(ST_MOE_EXPERTS, st));
	k_moe_gemm<MOE_GATEUP><<<dim3(max_tiles, cdiv(I, 64)), 128, 0, st>>>(
	    A.act.p, XN, M.gate_up.as<bf16_t>(), A.perm.as<int32_t>(), k, A.off.as<int32_t>(), A.tiles.as<int32_t>(), E,
	    I, H);
	QR_CKL("moe_gemm_gateup");
	k_moe_gemm<MOE_DOWN><<<dim3(max_tiles, cdiv(H, 128)), 128, 0, st>>>(
	    A.y.p, A.act.as<bf16_t>(), M.down.as<bf16_t>(), nullptr, k, A.off.as<int32_t>(), A.tiles.as<int32_t>(), E, H,
	    I);
	QR_CKL("moe_gemm_down");
	QR_TRY(mark(ST_MOE_SHARED, st));
	float *SO = A.shared_out.as<float>();
	if (decode) {
		QR_TRY(launch_gemv(GEMV_Y_SWIGLU, A.shared_act.p, XN, M.shared_gu.as<bf16_t>(), 2 * Is, H, st));
		QR_TRY(launch_gemv(GEMV_Y_F32, SO, A.shared_act.as<bf16_t>(), M.shared_down.as<bf16_t>(), H, Is, st));
	} else {
		QR_TRY(qr_gemm_bf16(big.p, 0, 2 * Is, XN, H, M.shared_gu.as<bf16_t>(), H, T, 2 * Is, H, st));
		QR_TRY(launch_swiglu_rows(A.shared_act.as<bf16_t>(), big.as<bf16_t>(), T, Is, st));
		QR_TRY(qr_gemm_bf16(SO, 1, H, A.shared_act.as<bf16_t>(), Is, M.shared_down.as<bf16_t>(), Is, T, H, Is, st));
	}
	float *eo = nullptr, *mo = nullptr;
	if (trace) {
		QR_TRY(trace_grow(T));
		eo = trace->tmp.as<float>();
		mo = trace->tmp2.as<float>();
	}
	k_moe_combine<<<T, 256, 0, st>>>(X, A.y.as<float>(), A.pos.as<int32_t>(), A.w.as<float>(), SO, RL + E, E + 1, H,
	                                 k, eo, mo);
	QR_CKL("moe_combine");
	if (trace) {
		QR_TRY(rec(li, "experts_out", eo, 0, H, T, H, T, H, 0));
		QR_TRY(rec(li, "shared_out", SO, 0, H, T, H, T, H, 0));
		QR_TRY(rec(li, "shared_gate", RL + E, 0, E + 1, T, 1, T, 1, 0));
		QR_TRY(rec(li, "mlp_out", mo, 0, H, T, H, T, H, 0));
	}
	return QR_OK;
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
	k_moe_route<<<t, 256, 0, st>>>(dl.as<float>(), e, e, k, norm, di.as<int32_t>(), dw.as<float>(), nullptr);
	QR_CKL("moe_route");
	QR_CK(cudaStreamSynchronize(st));
	QR_TRY(download(ids, di, (size_t)t * k));
	return download(w, dw, (size_t)t * k);
}
