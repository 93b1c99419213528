// gemv.cu: the one GEMV, y[n] = W[n, :] · x for one token (every decode
// projection: bf16 weights streamed once, fp32 sums), with the input and
// output stages fused that decode needs.
#include "common.cuh"
#include "internal.cuh"

// x is staged in shared memory, each warp takes ROWS rows with U 16-byte
// loads in flight per lane; the fused input and output stages:
//   XM 0: x as given; XM 1: x = SiLU(x[:K]) ⊙ x[K:2K] (the MLP's gate | up);
//   YM 0: y bf16; YM 1: y fp32 += (a residual add); YM 2: y fp32 =.
template <int ROWS, int U, int XM, int YM>
__global__ void __launch_bounds__(256) k_gemv_m(void *__restrict__ y, const bf16_t *__restrict__ x,
                                                const bf16_t *__restrict__ W, int N, int K) {
	extern __shared__ __align__(16) unsigned char qr_smem[];
	uint4 *xs = (uint4 *)qr_smem;
	const int n8 = K / 8;
	for (int i = threadIdx.x; i < n8; i += blockDim.x) {
		if (XM == 0) {
			xs[i] = __ldg((const uint4 *)x + i);
		} else {
			const uint4 g = __ldg((const uint4 *)x + i), u = __ldg((const uint4 *)(x + K) + i);
			const unsigned gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
			unsigned r[4];
#pragma unroll
			for (int j = 0; j < 4; j++)
				r[j] = pack_bf2(silu(__uint_as_float(gw[j] << 16)) * __uint_as_float(uw[j] << 16),
				                silu(__uint_as_float(gw[j] & 0xffff0000u)) * __uint_as_float(uw[j] & 0xffff0000u));
			xs[i] = make_uint4(r[0], r[1], r[2], r[3]);
		}
	}
	__syncthreads();
	const int lane = threadIdx.x & 31;
	const int row0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * ROWS;
	if (row0 >= N)
		return;
	const uint4 *wr[ROWS];
#pragma unroll
	for (int r = 0; r < ROWS; r++)
		wr[r] = (const uint4 *)(W + (size_t)min(row0 + r, N - 1) * K);
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
			const unsigned bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
			for (int r = 0; r < ROWS; r++) {
				const unsigned aw[4] = {a[r][u].x, a[r][u].y, a[r][u].z, a[r][u].w};
#pragma unroll
				for (int j = 0; j < 4; j++) {
					acc[r] = fmaf(__uint_as_float(aw[j] << 16), __uint_as_float(bw[j] << 16), acc[r]);
					acc[r] = fmaf(__uint_as_float(aw[j] & 0xffff0000u), __uint_as_float(bw[j] & 0xffff0000u), acc[r]);
				}
			}
		}
	}
#pragma unroll
	for (int r = 0; r < ROWS; r++) {
		const float s = warp_sum(acc[r]);
		if (lane == 0 && row0 + r < N) {
			if (YM == 0)
				((bf16_t *)y)[row0 + r] = f2bf(s);
			else if (YM == 1)
				((float *)y)[row0 + r] += s;
			else
				((float *)y)[row0 + r] = s;
		}
	}
}

template <int XM, int YM> static int gemv_launch(void *y, const bf16_t *x, const bf16_t *w, int n, int k,
                                                cudaStream_t st) {
	QR_ARG(k % 8 == 0 && k <= 24576 && ((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0,
	       "gemv: k=%d (multiple of 8, <= 24576) or alignment", k);
	const size_t sm = (size_t)k * 2;
	if (n >= 8192)
		k_gemv_m<2, 4, XM, YM><<<cdiv(n, 16), 256, sm, st>>>(y, x, w, n, k);
	else
		k_gemv_m<1, 8, XM, YM><<<cdiv(n, 8), 256, sm, st>>>(y, x, w, n, k);
	QR_CKL("gemv_m");
	return QR_OK;
}

int launch_gemv(int xmode, int ymode, void *y, const bf16_t *x, const bf16_t *w, int n, int k, cudaStream_t st) {
	switch (xmode * 3 + ymode) {
	case GEMV_X_PLAIN * 3 + GEMV_Y_BF16: return gemv_launch<GEMV_X_PLAIN, GEMV_Y_BF16>(y, x, w, n, k, st);
	case GEMV_X_PLAIN * 3 + GEMV_Y_ADD_F32: return gemv_launch<GEMV_X_PLAIN, GEMV_Y_ADD_F32>(y, x, w, n, k, st);
	case GEMV_X_PLAIN * 3 + GEMV_Y_F32: return gemv_launch<GEMV_X_PLAIN, GEMV_Y_F32>(y, x, w, n, k, st);
	case GEMV_X_SWIGLU * 3 + GEMV_Y_ADD_F32: return gemv_launch<GEMV_X_SWIGLU, GEMV_Y_ADD_F32>(y, x, w, n, k, st);
	}
	QR_ARG(false, "gemv: unsupported modes x=%d y=%d", xmode, ymode);
	return QR_EARG;
}
