// gemv.cu: the one GEMV, y[n] = W[n, :] · x for one token (every decode
// projection: bf16 weights streamed once, fp32 sums), with the output
// stages fused that decode needs.
#include "common.cuh"
#include "internal.cuh"

// x [K] bf16 is staged in shared memory; each warp takes ROWS rows with U
// 16-byte loads in flight per lane. The output stages (YM):
//   0: y bf16 =; 1: y fp32 += (a residual add); 2: y fp32 =;
//   3: the MLP's SwiGLU: W is gate_proj rows over up_proj rows (N = 2I),
//      warp j takes rows j and I + j (ROWS = 2) and writes the bf16
//      y[j] = SiLU(g)·u of g and u rounded to bf16 first, the values the
//      separate form (gate | up to bf16, then SwiGLU) gives, computed once
//      instead of by every block of the down projection after it.
// Launched with programmatic dependent launch (launch_pdl): a block may
// start while the kernel before drains; every block waits for that kernel
// (pdl_wait) before staging x.
template <int ROWS, int U, int YM>
__global__ void __launch_bounds__(256) k_gemv_m(void *__restrict__ y, const bf16_t *__restrict__ x,
                                                const bf16_t *__restrict__ W, int N, int K) {
	static_assert(YM != 3 || ROWS == 2, "the SwiGLU output pairs a gate row with its up row");
	extern __shared__ __align__(16) unsigned char qr_smem[];
	pdl_trigger(); // the next kernel may launch once every block has started
	uint4 *xs = (uint4 *)qr_smem;
	const int n8 = K / 8;
	const int lane = threadIdx.x & 31, warp = blockIdx.x * 8 + (threadIdx.x >> 5);
	// Outputs: rows row0 .. row0 + ROWS - 1, or (YM 3) row pair (j, I + j).
	const int outs = YM == 3 ? N / 2 : N, row0 = YM == 3 ? warp : warp * ROWS;
	pdl_wait(); // every block, before reading x or writing y
	// x was just written by the kernel before: L2-coherent loads, unrolled so
	// a thread's loads are in flight together.
#pragma unroll 4
	for (int i = threadIdx.x; i < n8; i += blockDim.x)
		xs[i] = ld_cg((const uint4 *)x + i);
	__syncthreads();
	if (row0 >= outs)
		return;
	const uint4 *wr[ROWS];
#pragma unroll
	for (int r = 0; r < ROWS; r++) {
		const int row = YM == 3 ? row0 + r * outs : min(row0 + r, N - 1);
		wr[r] = (const uint4 *)(W + (size_t)row * K);
	}
	float acc[ROWS];
#pragma unroll
	for (int r = 0; r < ROWS; r++)
		acc[r] = 0.0f;
	for (int base = lane; base < n8; base += 32 * U) {
		uint4 a[ROWS][U];
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int r = 0; r < ROWS; r++)
				if (base + 32 * u < n8)
					a[r][u] = __ldg(wr[r] + base + 32 * u);
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (base + 32 * u >= n8)
				break;
			const uint4 b = xs[base + 32 * u];
#pragma unroll
			for (int r = 0; r < ROWS; r++)
				acc[r] = dot8_bf16(acc[r], a[r][u], b);
		}
	}
	float s[ROWS];
#pragma unroll
	for (int r = 0; r < ROWS; r++)
		s[r] = warp_sum(acc[r]);
	if (lane != 0)
		return;
	if (YM == 3) {
		((bf16_t *)y)[row0] = f2bf(silu(bf2f(f2bf(s[0]))) * bf2f(f2bf(s[ROWS - 1])));
		return;
	}
#pragma unroll
	for (int r = 0; r < ROWS; r++) {
		if (row0 + r >= N)
			break;
		if (YM == 0)
			((bf16_t *)y)[row0 + r] = f2bf(s[r]);
		else if (YM == 1)
			((float *)y)[row0 + r] += s[r];
		else
			((float *)y)[row0 + r] = s[r];
	}
}

// Launch shapes (launch_gemv's shape, QR_GEMV_SHAPES): rows per warp and
// 16-byte loads in flight per lane and row below 8192 outputs, from 8192,
// and for the SwiGLU form (two rows a warp). Each lane sums its chunks in
// ascending order in every shape, so every shape gives the same bits.
struct GemvShape {
	int small_rows, small_chunks, big_rows, big_chunks, swiglu_chunks;
};
static constexpr GemvShape gemv_shapes[QR_GEMV_SHAPES] = {
    {1, 8, 2, 4, 4}, {1, 16, 2, 8, 8}, {2, 8, 4, 4, 8}, {1, 16, 2, 4, 4}};

template <int ROWS, int U, int YM>
static int gemv_go(void *y, const bf16_t *x, const bf16_t *w, int n, int k, size_t sm, cudaStream_t st) {
	const int outs = YM == GEMV_Y_SWIGLU ? n / 2 : n;
	return launch_pdl(k_gemv_m<ROWS, U, YM>, dim3(cdiv(outs, YM == GEMV_Y_SWIGLU ? 8 : 8 * ROWS)), dim3(256), sm, st,
	                  y, x, w, n, k);
}

template <int YM>
static int gemv_launch(void *y, const bf16_t *x, const bf16_t *w, int n, int k, int shape, cudaStream_t st) {
	QR_ARG(k % 8 == 0 && k <= 24576 && ((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0,
	       "gemv: k=%d (multiple of 8, <= 24576) or alignment", k);
	QR_ARG(shape >= 0 && shape < QR_GEMV_SHAPES, "gemv: launch shape %d outside [0, %d)", shape, QR_GEMV_SHAPES);
	const GemvShape &g = gemv_shapes[shape];
	const size_t sm = (size_t)k * 2;
	if constexpr (YM == GEMV_Y_SWIGLU) {
		QR_ARG(n % 2 == 0, "gemv: the SwiGLU output needs gate and up rows, n=%d", n);
		if (g.swiglu_chunks == 8)
			return gemv_go<2, 8, YM>(y, x, w, n, k, sm, st);
		return gemv_go<2, 4, YM>(y, x, w, n, k, sm, st);
	} else {
		const int rows = n >= 8192 ? g.big_rows : g.small_rows, u = n >= 8192 ? g.big_chunks : g.small_chunks;
		if (rows == 1 && u == 8)
			return gemv_go<1, 8, YM>(y, x, w, n, k, sm, st);
		if (rows == 1 && u == 16)
			return gemv_go<1, 16, YM>(y, x, w, n, k, sm, st);
		if (rows == 2 && u == 4)
			return gemv_go<2, 4, YM>(y, x, w, n, k, sm, st);
		if (rows == 2 && u == 8)
			return gemv_go<2, 8, YM>(y, x, w, n, k, sm, st);
		if (rows == 4 && u == 4)
			return gemv_go<4, 4, YM>(y, x, w, n, k, sm, st);
		QR_ARG(false, "gemv: launch shape %d has no kernel for %d rows", shape, n);
		return QR_EARG;
	}
}

int launch_gemv(int ymode, void *y, const bf16_t *x, const bf16_t *w, int n, int k, cudaStream_t st, int shape) {
	switch (ymode) {
	case GEMV_Y_BF16: return gemv_launch<GEMV_Y_BF16>(y, x, w, n, k, shape, st);
	case GEMV_Y_ADD_F32: return gemv_launch<GEMV_Y_ADD_F32>(y, x, w, n, k, shape, st);
	case GEMV_Y_F32: return gemv_launch<GEMV_Y_F32>(y, x, w, n, k, shape, st);
	case GEMV_Y_SWIGLU: return gemv_launch<GEMV_Y_SWIGLU>(y, x, w, n, k, shape, st);
	}
	QR_ARG(false, "gemv: unsupported output mode %d", ymode);
	return QR_EARG;
}

// The GEMV on host data (its check against the CPU): x [k], w [n, k] rounded
// to bf16 as decode holds them; y [n] (or [n/2] for GEMV_Y_SWIGLU) fp32,
// read first for GEMV_Y_ADD_F32; bf16 outputs come back widened.
extern "C" int qr_gemv(float *y, const float *x, const float *w, int n, int k, int ymode) {
	QR_TRY(qr_require());
	QR_ARG(y && x && w && n > 0 && k > 0 && ymode >= GEMV_Y_BF16 && ymode <= GEMV_Y_SWIGLU,
	       "qr_gemv: bad arguments (n=%d k=%d mode=%d)", n, k, ymode);
	cudaStream_t st = g_qr.stream;
	const size_t ny = ymode == GEMV_Y_SWIGLU ? (size_t)n / 2 : (size_t)n;
	const bool bf_out = ymode == GEMV_Y_BF16 || ymode == GEMV_Y_SWIGLU;
	DevBuf fx, fw, bx, bw, dy, fy;
	QR_TRY(upload(fx, x, (size_t)k));
	QR_TRY(upload(fw, w, (size_t)n * k));
	QR_TRY(bx.alloc((size_t)k * 2));
	QR_TRY(bw.alloc((size_t)n * k * 2));
	QR_TRY(qr_convert_f32_bf16(bx.as<bf16_t>(), fx.as<float>(), (size_t)k, st));
	QR_TRY(qr_convert_f32_bf16(bw.as<bf16_t>(), fw.as<float>(), (size_t)n * k, st));
	if (ymode == GEMV_Y_ADD_F32) {
		QR_TRY(upload(dy, y, ny));
	} else {
		QR_TRY(dy.alloc(ny * (bf_out ? 2 : 4)));
		QR_TRY(qr_fill_nan(dy.p, ny * (bf_out ? 2 : 4), st));
	}
	QR_TRY(launch_gemv(ymode, dy.p, bx.as<bf16_t>(), bw.as<bf16_t>(), n, k, st));
	if (bf_out) {
		QR_TRY(fy.alloc(ny * 4));
		QR_TRY(qr_convert_bf16_f32(fy.as<float>(), dy.as<bf16_t>(), ny, st));
	}
	QR_CK(cudaStreamSynchronize(st));
	return download(y, bf_out ? fy : dy, ny);
}
