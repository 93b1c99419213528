// moe_f32.cu: the sparse MoE MLP in the fp32 model ("cuda-fp32"; moe.cu
// has the math and the bf16 forms). Three parts differ from bf16:
//   - the router selects as torch.topk on the CPU does, ties included: the
//     golden checkpoints were made by transformers on the CPU, and at an
//     exact tie its choice follows GNU libstdc++'s selection steps, not the
//     lower index (layers/moe/topk.go derives them; this is the same code);
//   - the softmax before it is the host's (max-subtracted, exponentials in
//     double rounded to float, their sum in double), so near-ties order as
//     on the host;
//   - the grouped expert GEMMs are a SIMT fp32 kernel over the same tiles as
//     the bf16 one (launch_moe_group), gate/up then SwiGLU then down.
#include <math.h>

#include "model.cuh"

// ---- torch.topk's CPU selection (layers/moe/topk.go, step for step) ----

struct TopPair {
	float v;
	int idx;
};

// x goes before y: larger, or NaN where y is not.
__device__ __forceinline__ bool tk_before(TopPair x, TopPair y) {
	const bool xn = x.v != x.v, yn = y.v != y.v;
	return (xn && !yn) || x.v > y.v;
}

__device__ __forceinline__ void tk_swap(TopPair *q, int a, int b) {
	const TopPair t = q[a];
	q[a] = q[b];
	q[b] = t;
}

__device__ int tk_lg(int n) { // ⌊log₂ n⌋ for n ≥ 1
	int r = -1;
	for (; n > 0; n >>= 1)
		r++;
	return r;
}

__device__ void tk_adjust_heap(TopPair *h, int hole, int n, TopPair v) {
	const int top = hole;
	int child = hole;
	while (child < (n - 1) / 2) {
		child = 2 * (child + 1);
		if (tk_before(h[child], h[child - 1]))
			child--;
		h[hole] = h[child];
		hole = child;
	}
	if ((n & 1) == 0 && child == (n - 2) / 2) {
		child = 2 * (child + 1);
		h[hole] = h[child - 1];
		hole = child - 1;
	}
	int parent = (hole - 1) / 2;
	while (hole > top && tk_before(h[parent], v)) {
		h[hole] = h[parent];
		hole = parent;
		parent = (hole - 1) / 2;
	}
	h[hole] = v;
}

__device__ void tk_make_heap(TopPair *h, int n) {
	if (n < 2)
		return;
	for (int parent = (n - 2) / 2;; parent--) {
		tk_adjust_heap(h, parent, n, h[parent]);
		if (parent == 0)
			return;
	}
}

// The top of the heap q[:n] to q[result], the old q[result] into the heap.
__device__ void tk_pop_heap(TopPair *q, int n, int result) {
	const TopPair v = q[result];
	q[result] = q[0];
	tk_adjust_heap(q, 0, n, v);
}

__device__ void tk_heap_select(TopPair *q, int len, int m) {
	tk_make_heap(q, m);
	for (int i = m; i < len; i++)
		if (tk_before(q[i], q[0]))
			tk_pop_heap(q, m, i);
}

__device__ void tk_partial_sort(TopPair *q, int len, int m) {
	tk_heap_select(q, len, m);
	for (int end = m; end > 1;) {
		end--;
		tk_pop_heap(q, end, end);
	}
}

__device__ void tk_unguarded_linear_insert(TopPair *q, int last) {
	const TopPair v = q[last];
	while (tk_before(v, q[last - 1])) {
		q[last] = q[last - 1];
		last--;
	}
	q[last] = v;
}

__device__ void tk_insertion_sort(TopPair *q, int len) {
	for (int i = 1; i < len; i++) {
		if (tk_before(q[i], q[0])) {
			const TopPair v = q[i];
			for (int j = i; j > 0; j--)
				q[j] = q[j - 1];
			q[0] = v;
		} else {
			tk_unguarded_linear_insert(q, i);
		}
	}
}

__device__ void tk_move_median_to_first(TopPair *q, int result, int a, int b, int c) {
	if (tk_before(q[a], q[b])) {
		if (tk_before(q[b], q[c]))
			tk_swap(q, result, b);
		else if (tk_before(q[a], q[c]))
			tk_swap(q, result, c);
		else
			tk_swap(q, result, a);
	} else if (tk_before(q[a], q[c])) {
		tk_swap(q, result, a);
	} else if (tk_before(q[b], q[c])) {
		tk_swap(q, result, c);
	} else {
		tk_swap(q, result, b);
	}
}

__device__ int tk_unguarded_partition(TopPair *q, int first, int last, int pivot) {
	for (;;) {
		while (tk_before(q[first], q[pivot]))
			first++;
		last--;
		while (tk_before(q[pivot], q[last]))
			last--;
		if (first >= last)
			return first;
		tk_swap(q, first, last);
		first++;
	}
}

__device__ int tk_partition_pivot(TopPair *q, int first, int last) {
	const int mid = first + (last - first) / 2;
	tk_move_median_to_first(q, first, first + 1, mid, last - 1);
	return tk_unguarded_partition(q, first + 1, last, first);
}

__device__ void tk_nth_element(TopPair *q, int len, int nth) {
	if (nth >= len)
		return;
	int first = 0, last = len, depth = 2 * tk_lg(len);
	while (last - first > 3) {
		if (depth == 0) {
			tk_heap_select(q + first, last - first, nth + 1 - first);
			tk_swap(q, first, nth);
			return;
		}
		depth--;
		const int cut = tk_partition_pivot(q, first, last);
		if (cut <= nth)
			first = cut;
		else
			last = cut;
	}
	tk_insertion_sort(q + first, last - first);
}

// std::sort's introsort loop; the recursion is at most 2⌊log₂ n⌋ deep
// (n < 64 here: the first k − 1 of the selection).
__device__ void tk_introsort_loop(TopPair *q, int first, int last, int depth) {
	while (last - first > 16) {
		if (depth == 0) {
			tk_partial_sort(q + first, last - first, last - first);
			return;
		}
		depth--;
		const int cut = tk_partition_pivot(q, first, last);
		tk_introsort_loop(q, cut, last, depth);
		last = cut;
	}
}

__device__ void tk_sort(TopPair *q, int len) {
	if (len < 2)
		return;
	tk_introsort_loop(q, 0, len, 2 * tk_lg(len));
	if (len > 16) {
		tk_insertion_sort(q, 16);
		for (int i = 16; i < len; i++)
			tk_unguarded_linear_insert(q, i);
	} else {
		tk_insertion_sort(q, len);
	}
}

// One thread per token: softmax of its E logits (row stride ld), then
// torch.topk's k as the CPU orders them, renormalised when norm; q is the
// token's queue of E pairs (scratch).
__global__ void k_moe_route_f32(const float *__restrict__ logits, int ld, int T, int E, int k, int norm,
                                TopPair *__restrict__ queue, int32_t *__restrict__ ids, float *__restrict__ w,
                                float *__restrict__ idf) {
	const int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= T)
		return;
	const float *x = logits + (size_t)t * ld;
	TopPair *q = queue + (size_t)t * E;
	float m = -INFINITY;
	for (int i = 0; i < E; i++) // Go's max: NaN wins
		m = (x[i] != x[i] || m != m) ? NAN : fmaxf(m, x[i]);
	double s = 0.0;
	for (int i = 0; i < E; i++) {
		const float p = (float)exp((double)(x[i] - m));
		q[i].v = p, q[i].idx = i;
		s += (double)p;
	}
	const float inv = (float)s;
	for (int i = 0; i < E; i++)
		q[i].v = q[i].v / inv;
	if (k * 64 <= E) {
		tk_partial_sort(q, E, k);
	} else {
		tk_nth_element(q, E, k - 1);
		tk_sort(q, k - 1);
	}
	float sum = 0.0f;
	for (int j = 0; j < k; j++)
		sum += q[j].v;
	for (int j = 0; j < k; j++) {
		const size_t o = (size_t)t * k + j;
		ids[o] = q[j].idx;
		w[o] = norm ? q[j].v / sum : q[j].v;
		if (idf)
			idf[o] = (float)q[j].idx;
	}
}

// ---- grouped fp32 GEMM over the routed rows ----
//
// C[r, c] = Σ_k A[src(r), k] · W_e(r)[c, k] for the grouped rows r (src(r) =
// perm[r] / topk, the token, when GATHER; else r itself) and c < N, W_e =
// W + e·N·K. Block (x, y): tile x of the grouping's tile list (MOE_BM rows
// of one expert), columns y·64 …; each thread owns 8 rows × 4 columns.
#define MF_BN 64
#define MF_BK 16
template <bool GATHER>
__global__ void __launch_bounds__(256)
    k_moe_gemm_f32(float *__restrict__ Cm, int ldc, const float *__restrict__ A, int lda, const float *__restrict__ W,
                   const int32_t *__restrict__ perm, int topk, const int32_t *__restrict__ off,
                   const int32_t *__restrict__ tiles, int E, int N, int K) {
	__shared__ float As[MF_BK][MOE_BM + 4];
	__shared__ float Ws[MF_BK][MF_BN + 4];
	__shared__ int src[MOE_BM];
	const int tile = blockIdx.x;
	if (tile >= tiles[E])
		return;
	int lo = 0, hi = E; // the expert: the last e with tiles[e] <= tile
	while (hi - lo > 1) {
		const int mid = (lo + hi) >> 1;
		if (tiles[mid] <= tile)
			lo = mid;
		else
			hi = mid;
	}
	const int e = lo, r0 = off[e] + (tile - tiles[e]) * MOE_BM, r1 = off[e + 1], c0 = blockIdx.y * MF_BN;
	const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
	for (int i = tid; i < MOE_BM; i += 256) {
		const int r = r0 + i;
		src[i] = r < r1 ? (GATHER ? perm[r] / topk : r) : -1;
	}
	__syncthreads();
	const float *We = W + (size_t)e * N * K;
	float acc[8][4];
#pragma unroll
	for (int i = 0; i < 8; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;
	for (int k0 = 0; k0 < K; k0 += MF_BK) {
		for (int i = tid; i < MOE_BM * MF_BK; i += 256) {
			const int r = i / MF_BK, kk = i % MF_BK, sr = src[r];
			As[kk][r] = sr >= 0 && k0 + kk < K ? A[(size_t)sr * lda + k0 + kk] : 0.0f;
		}
		for (int i = tid; i < MF_BN * MF_BK; i += 256) {
			const int c = i / MF_BK, kk = i % MF_BK;
			Ws[kk][c] = c0 + c < N && k0 + kk < K ? We[(size_t)(c0 + c) * K + k0 + kk] : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < MF_BK; kk++) {
			float a[8], b[4];
#pragma unroll
			for (int i = 0; i < 8; i++)
				a[i] = As[kk][ty * 8 + i];
#pragma unroll
			for (int j = 0; j < 4; j++)
				b[j] = Ws[kk][tx * 4 + j];
#pragma unroll
			for (int i = 0; i < 8; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 8; i++) {
		const int r = ty * 8 + i;
		if (src[r] < 0)
			continue;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int c = c0 + tx * 4 + j;
			if (c < N)
				Cm[(size_t)(r0 + r) * ldc + c] = acc[i][j];
		}
	}
}

// ---- the block's MLP ----

int DevModel::moe_step_f32(const PlanStep &s, int T, cudaStream_t st) {
	MoeW &M = *blocks[s.layer]->moe;
	MoeActs &A = macts;
	const int H = d.hidden, E = d.experts, k = d.topk, I = d.moe_inter, Is = d.shared_inter, n = T * k;
	const int RR = moe_router_rows(E);
	float *X = x.as<float>(), *XN = xn.as<float>(), *RL = A.logits.as<float>(), *SO = A.shared_out.as<float>();
	switch (s.op) {
	case QR_OP_MOE_ROUTE:
		QR_TRY(qr_gemm_f32(RL, RR, XN, H, M.router.as<float>(), H, T, RR, H, 0, st));
		k_moe_route_f32<<<cdiv(T, 64), 64, 0, st>>>(RL, RR, T, E, k, d.norm_topk, A.topq.as<TopPair>(),
		                                           A.ids.as<int32_t>(), A.w.as<float>(), A.idf.as<float>());
		QR_CKL("moe_route_f32");
		return QR_OK;
	case QR_OP_MOE_EXPERTS: {
		QR_TRY(mark(ST_MOE_ROUTE, st)); // the grouping counts with the router
		QR_TRY(launch_moe_group(A, n, E, st));
		QR_TRY(mark(ST_MOE_EXPERTS, st));
		const unsigned tiles = moe_max_tiles(n, E);
		const int32_t *perm = A.perm.as<int32_t>(), *off = A.off.as<int32_t>(), *tl = A.tiles.as<int32_t>();
		k_moe_gemm_f32<true><<<dim3(tiles, cdiv(2 * I, MF_BN)), 256, 0, st>>>(
		    A.gu.as<float>(), 2 * I, XN, H, M.gate_up.as<float>(), perm, k, off, tl, E, 2 * I, H);
		QR_CKL("moe_gemm_f32 gate/up");
		QR_TRY(launch_swiglu_rows_f32(A.act.as<float>(), A.gu.as<float>(), n, I, st));
		k_moe_gemm_f32<false><<<dim3(tiles, cdiv(H, MF_BN)), 256, 0, st>>>(A.y.as<float>(), H, A.act.as<float>(), I,
		                                                                  M.down.as<float>(), nullptr, k, off, tl, E, H,
		                                                                  I);
		QR_CKL("moe_gemm_f32 down");
		return QR_OK;
	}
	case QR_OP_MOE_SHARED: {
		float *GU = big.as<float>(), *SA = A.shared_act.as<float>();
		QR_TRY(qr_gemm_f32(GU, 2 * Is, XN, H, M.shared_gu.as<float>(), H, T, 2 * Is, H, 0, st));
		QR_TRY(launch_swiglu_rows_f32(SA, GU, T, Is, st));
		return qr_gemm_f32(SO, H, SA, Is, M.shared_down.as<float>(), Is, T, H, Is, 0, st);
	}
	case QR_OP_MOE_COMBINE: {
		float *eo, *mo; // the routed sum and the whole output, for the trace
		QR_TRY(trace_scratch(T, &eo, &mo));
		QR_TRY(launch_moe_combine_f32(X, A.y.as<float>(), A.pos.as<int32_t>(), A.w.as<float>(), SO, RL + E, RR, T, H, k,
		                              eo, mo, st));
		return QR_OK;
	}
	}
	QR_ARG(false, "moe: op %d is not an MoE op", s.op);
	return QR_EARG;
}
