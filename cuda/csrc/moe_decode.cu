// moe_decode.cu: decode's expert MLPs (moe.cu runs the prefill's grouped
// GEMMs and the combine): each token's k experts, and a batch's shared
// experts, as gathered GEMVs, in the launch shapes QR_OP_MOE_EXPERTS's arg
// picks.
#include <math.h>

#include "model.cuh"

// Block (x, j): 8 warps, R output rows each (each x chunk is loaded once for
// the R rows, and R rows of loads are in flight). Slots j < nr = T·k are
// expert ids[j] of token j / k; slot nr + t is token t's shared expert (its
// own weights and width Ns). GATEUP: x is XN [T, K = H]; act[j, i] =
// bf16(SiLU(bf16(g_i)) · bf16(u_i)) for gate row i and up row N + i (N = I;
// the shared expert's to sact [T, Ns]). DOWN: x is act[j] [K = I] (the
// shared expert: sact[t] [Ks = Is]); y[j, h] bf16 (the shared expert: fp32
// sout[t, h]), h < N = H. 16-byte loads; K % 8 == 0. A batch of T decode rows
// reads an expert once per slot that chose it: below a few dozen rows that
// is less than the grouped GEMM's tiles cost. Each lane keeps U chunks of
// each row in flight and sums its chunks in ascending order, so every
// (R, U) gives the same bits (moe_decode_shapes picks them).
template <int MODE, int R, int U>
__global__ void __launch_bounds__(256)
    k_moe_gemv(void *__restrict__ out, const bf16_t *__restrict__ x, const bf16_t *__restrict__ W,
               const int32_t *__restrict__ ids, int nr, int k, int N, int K, const bf16_t *__restrict__ Ws, int Ns,
               int Ks, void *__restrict__ sact, float *__restrict__ sout) {
	constexpr int NW = MODE == MOE_GATEUP ? 2 * R : R; // weight rows per warp
	pdl_trigger();
	pdl_wait(); // ids, x and act are the kernels before's outputs
	const int j = blockIdx.y, lane = threadIdx.x & 31, row0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * R;
	const bool shared = j >= nr;
	const int t = shared ? j - nr : j / k; // the token
	const int n = shared && MODE == MOE_GATEUP ? Ns : N, kk = shared && MODE == MOE_DOWN ? Ks : K;
	if (row0 >= n)
		return;
	const bf16_t *We = shared ? Ws : W + (size_t)ids[j] * (MODE == MOE_GATEUP ? 2 * (size_t)N : (size_t)N) * K;
	if (shared) {
		sact = (bf16_t *)sact + (size_t)t * (MODE == MOE_GATEUP ? Ns : Ks);
		sout += (size_t)t * N;
	}
	const bf16_t *xr = MODE == MOE_GATEUP ? x + (size_t)t * K : shared ? (const bf16_t *)sact : x + (size_t)j * K;
	const uint4 *xv = (const uint4 *)xr;
	const uint4 *wr[NW]; // gate rows, then (GATEUP) their up rows; past n, the last row again
#pragma unroll
	for (int r = 0; r < NW; r++) {
		const int row = min(row0 + r % R, n - 1) + (r >= R ? n : 0);
		wr[r] = (const uint4 *)(We + (size_t)row * kk);
	}
	float a[NW];
	rows_dot<NW, U>(a, wr, xv, kk / 8, lane);
	if (lane != 0)
		return;
#pragma unroll
	for (int r = 0; r < R; r++) {
		const int row = row0 + r;
		if (row >= n)
			break;
		if (MODE == MOE_GATEUP) {
			bf16_t *o = shared ? (bf16_t *)sact : (bf16_t *)out + (size_t)j * N;
			o[row] = f2bf(silu(bf2f(f2bf(a[r]))) * bf2f(f2bf(a[R + r])));
		} else if (shared) {
			sout[row] = a[r];
		} else {
			((bf16_t *)out)[(size_t)j * N + row] = f2bf(a[r]);
		}
	}
}

// The decode GEMVs' launch shapes, QR_OP_MOE_EXPERTS's arg: rows per warp
// and chunks in flight per lane for gate/up, then for down. Every shape
// gives the same bits; shape 0 is the first one measured.
struct MoeDecodeShape {
	int gu_rows, gu_chunks, down_rows, down_chunks;
};
static constexpr MoeDecodeShape moe_decode_shapes[QR_MOE_DECODE_SHAPES] = {{2, 2, 4, 2}, {1, 4, 2, 2}, {1, 8, 4, 2}, {2, 4, 1, 2}};

template <int R, int U>
static int moe_gateup_launch(const MoeDecodeArgs &a, cudaStream_t st) {
	const int gn = a.I > a.Is ? a.I : a.Is;
	return launch_pdl(k_moe_gemv<MOE_GATEUP, R, U>, dim3(cdiv(gn, 8 * R), a.n + a.shared), dim3(256), 0, st, a.A->act.p,
	                  a.XN, a.M->gate_up.as<const bf16_t>(), a.A->ids.as<const int32_t>(), a.n, a.k, a.I, a.H,
	                  a.M->shared_gu.as<const bf16_t>(), a.Is, a.H, a.A->shared_act.p, (float *)nullptr);
}

template <int R, int U>
static int moe_down_launch(const MoeDecodeArgs &a, cudaStream_t st) {
	MoeActs &A = *a.A;
	return launch_pdl(k_moe_gemv<MOE_DOWN, R, U>, dim3(cdiv(a.H, 8 * R), a.n + a.shared), dim3(256), 0, st, A.y.p,
	                  A.act.as<const bf16_t>(), a.M->down.as<const bf16_t>(), A.ids.as<const int32_t>(), a.n, a.k, a.H,
	                  a.I, a.M->shared_down.as<const bf16_t>(), a.H, a.Is, A.shared_act.p, A.shared_out.as<float>());
}

int launch_moe_decode_gemvs(int shape, const MoeDecodeArgs &a, cudaStream_t st) {
	QR_ARG(shape >= 0 && shape < QR_MOE_DECODE_SHAPES, "moe: decode launch shape %d outside [0, %d)", shape,
	       QR_MOE_DECODE_SHAPES);
	const MoeDecodeShape &sh = moe_decode_shapes[shape];
	if (sh.gu_rows == 2 && sh.gu_chunks == 2)
		QR_TRY((moe_gateup_launch<2, 2>(a, st)));
	else if (sh.gu_rows == 1 && sh.gu_chunks == 4)
		QR_TRY((moe_gateup_launch<1, 4>(a, st)));
	else if (sh.gu_rows == 1 && sh.gu_chunks == 8)
		QR_TRY((moe_gateup_launch<1, 8>(a, st)));
	else if (sh.gu_rows == 2 && sh.gu_chunks == 4)
		QR_TRY((moe_gateup_launch<2, 4>(a, st)));
	else
		QR_ARG(false, "moe: decode launch shape %d has no gate/up kernel", shape);
	if (sh.down_rows == 4 && sh.down_chunks == 2)
		return moe_down_launch<4, 2>(a, st);
	if (sh.down_rows == 2 && sh.down_chunks == 2)
		return moe_down_launch<2, 2>(a, st);
	if (sh.down_rows == 1 && sh.down_chunks == 2)
		return moe_down_launch<1, 2>(a, st);
	QR_ARG(false, "moe: decode launch shape %d has no down kernel", shape);
	return QR_EARG;
}

