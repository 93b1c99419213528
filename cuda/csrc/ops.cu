// ops.cu: the small fused kernels around the mixers: RMSNorm (plain and
// 1+w), gated RMSNorm + SiLU(z), partial rotate-half RoPE and SwiGLU, with
// their host entry points; and the one-time kernel setup.
#include <math.h>

#include "common.cuh"
#include "internal.cuh"

int qr_gdn_init();
int qr_flash_attn_init();

int qr_kernels_init() {
	QR_TRY(qr_gdn_init());
	return qr_flash_attn_init();
}

// ---- RMSNorm: one block per row ----
template <typename Tx, typename Ty>
__global__ void __launch_bounds__(256) k_rmsnorm(Ty *__restrict__ y, const Tx *__restrict__ x, int n,
                                                 const float *__restrict__ w, float eps, int one_plus) {
	__shared__ float red[8];
	const size_t row = blockIdx.x;
	const Tx *xr = x + row * n;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const float v = ldf(xr + i);
		ss = fmaf(v, v, ss);
	}
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = ss;
	__syncthreads();
	float tot = 0.0f;
	for (int i = 0; i < (int)(blockDim.x >> 5); i++)
		tot += red[i];
	const float inv = rsqrtf(tot / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const float s = one_plus ? 1.0f + w[i] : w[i];
		stf(y + row * n + i, ldf(xr + i) * inv * s);
	}
}

// ---- RMSNorm of one fp32 row (decode): 1024 threads, one reduction ----
// The row and the weights are loaded once, as float4, into registers (n % 4
// == 0, n <= 16384): one memory round trip before the reduction, where the
// 256-thread form makes n / 256 dependent trips on a single SM, which is
// latency-bound for the one row a decode step norms.
#define RN_ROW_U 4
template <typename Ty>
__global__ void __launch_bounds__(1024) k_rmsnorm_row(Ty *__restrict__ y, const float *__restrict__ x, int n,
                                                      const float *__restrict__ w, float eps, int one_plus) {
	__shared__ float red[32];
	pdl_trigger(); // the GEMV after it may start streaming its weights
	const size_t row = blockIdx.x;
	const float4 *x4 = (const float4 *)(x + row * n), *w4 = (const float4 *)w;
	const int n4 = n / 4;
	float4 v[RN_ROW_U], s[RN_ROW_U];
	float ss = 0.0f;
#pragma unroll
	for (int u = 0; u < RN_ROW_U; u++) // the weights before the wait: no kernel writes them
		if (threadIdx.x + u * 1024 < n4)
			s[u] = __ldg(w4 + threadIdx.x + u * 1024);
	pdl_wait(); // x is the kernel before's output
#pragma unroll
	for (int u = 0; u < RN_ROW_U; u++) {
		const int i = threadIdx.x + u * 1024;
		if (i < n4) {
			v[u] = ld_cg4f(x4 + i);
			ss = fmaf(v[u].x, v[u].x, ss);
			ss = fmaf(v[u].y, v[u].y, ss);
			ss = fmaf(v[u].z, v[u].z, ss);
			ss = fmaf(v[u].w, v[u].w, ss);
		}
	}
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = ss;
	__syncthreads();
	float tot = 0.0f;
	for (int i = 0; i < 32; i++)
		tot += red[i];
	const float inv = rsqrtf(tot / (float)n + eps), o = one_plus ? 1.0f : 0.0f;
	Ty *yr = y + row * n;
#pragma unroll
	for (int u = 0; u < RN_ROW_U; u++) {
		const int i = threadIdx.x + u * 1024;
		if (i < n4) {
			stf(yr + 4 * i + 0, v[u].x * inv * (o + s[u].x));
			stf(yr + 4 * i + 1, v[u].y * inv * (o + s[u].y));
			stf(yr + 4 * i + 2, v[u].z * inv * (o + s[u].z));
			stf(yr + 4 * i + 3, v[u].w * inv * (o + s[u].w));
		}
	}
}

// ---- RMSNorm of many fp32 rows (prefill): a block per row, in registers ----
// Each of the 256 threads loads U float4 of the row and of the weights in
// one round trip, and the bf16 output leaves as 8-byte stores: the
// per-element form makes two dependent passes of 4-byte loads per row and
// reached about a quarter of the memory bandwidth at T = 8192 (n % 4 == 0,
// n <= 1024·U).
template <int U, typename Ty>
__global__ void __launch_bounds__(256) k_rmsnorm_vec(Ty *__restrict__ y, const float *__restrict__ x, int n,
                                                     const float *__restrict__ w, float eps, int one_plus) {
	__shared__ float red[8];
	const size_t row = blockIdx.x;
	const float4 *x4 = (const float4 *)(x + row * n), *w4 = (const float4 *)w;
	const int n4 = n / 4;
	float4 v[U], s[U];
	float ss = 0.0f;
#pragma unroll
	for (int u = 0; u < U; u++) {
		const int i = threadIdx.x + u * 256;
		if (i < n4) {
			v[u] = x4[i];
			s[u] = __ldg(w4 + i);
			ss = fmaf(v[u].x, v[u].x, ss);
			ss = fmaf(v[u].y, v[u].y, ss);
			ss = fmaf(v[u].z, v[u].z, ss);
			ss = fmaf(v[u].w, v[u].w, ss);
		}
	}
	ss = warp_sum(ss);
	if ((threadIdx.x & 31) == 0)
		red[threadIdx.x >> 5] = ss;
	__syncthreads();
	float tot = 0.0f;
#pragma unroll
	for (int i = 0; i < 8; i++)
		tot += red[i];
	const float inv = rsqrtf(tot / (float)n + eps), o = one_plus ? 1.0f : 0.0f;
	Ty *yr = y + row * n;
#pragma unroll
	for (int u = 0; u < U; u++) {
		const int i = threadIdx.x + u * 256;
		if (i < n4) {
			const float a = v[u].x * inv * (o + s[u].x), b = v[u].y * inv * (o + s[u].y);
			const float c = v[u].z * inv * (o + s[u].z), d = v[u].w * inv * (o + s[u].w);
			if constexpr (sizeof(Ty) == 2)
				*(uint2 *)(yr + 4 * i) = make_uint2(pack_bf2(a, b), pack_bf2(c, d));
			else
				*(float4 *)(yr + 4 * i) = make_float4(a, b, c, d);
		}
	}
}

template <int U>
static int rmsnorm_vec_launch(void *y, int ybf, const float *x, int rows, int n, const float *w, float eps,
                              int one_plus, cudaStream_t st) {
	if (ybf)
		k_rmsnorm_vec<U, bf16_t><<<rows, 256, 0, st>>>((bf16_t *)y, x, n, w, eps, one_plus);
	else
		k_rmsnorm_vec<U, float><<<rows, 256, 0, st>>>((float *)y, x, n, w, eps, one_plus);
	QR_CKL("rmsnorm_vec");
	return QR_OK;
}

int launch_rmsnorm(void *y, int ybf, const void *x, int xbf, int rows, int n, const float *w, float eps, int one_plus,
                   cudaStream_t st) {
	QR_ARG(rows >= 0 && n > 0, "rmsnorm: bad dims");
	if (rows == 0)
		return QR_OK;
	const bool vec = !xbf && n % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 15) == 0 &&
	                 ((uintptr_t)y & (ybf ? 7 : 15)) == 0;
	if (rows == 1 && vec && n <= 4 * 1024 * RN_ROW_U) {
		if (ybf)
			QR_TRY(launch_pdl(k_rmsnorm_row<bf16_t>, dim3(1), dim3(1024), 0, st, (bf16_t *)y, (const float *)x, n, w,
			                  eps, one_plus));
		else
			QR_TRY(launch_pdl(k_rmsnorm_row<float>, dim3(1), dim3(1024), 0, st, (float *)y, (const float *)x, n, w,
			                  eps, one_plus));
		return QR_OK;
	}
	if (vec && n <= 8 * 1024) {
		const float *xf = (const float *)x;
		switch ((n / 4 + 255) / 256) {
		case 1: return rmsnorm_vec_launch<1>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		case 2: return rmsnorm_vec_launch<2>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		case 3: return rmsnorm_vec_launch<3>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		case 4: return rmsnorm_vec_launch<4>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		case 5: return rmsnorm_vec_launch<5>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		case 6: return rmsnorm_vec_launch<6>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		case 7: return rmsnorm_vec_launch<7>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		default: return rmsnorm_vec_launch<8>(y, ybf, xf, rows, n, w, eps, one_plus, st);
		}
	}
	if (!xbf && !ybf)
		k_rmsnorm<float, float><<<rows, 256, 0, st>>>((float *)y, (const float *)x, n, w, eps, one_plus);
	else if (xbf && ybf)
		k_rmsnorm<bf16_t, bf16_t><<<rows, 256, 0, st>>>((bf16_t *)y, (const bf16_t *)x, n, w, eps, one_plus);
	else if (!xbf && ybf)
		k_rmsnorm<float, bf16_t><<<rows, 256, 0, st>>>((bf16_t *)y, (const float *)x, n, w, eps, one_plus);
	else
		k_rmsnorm<bf16_t, float><<<rows, 256, 0, st>>>((float *)y, (const bf16_t *)x, n, w, eps, one_plus);
	QR_CKL("rmsnorm");
	return QR_OK;
}

// ---- gated RMSNorm: one warp per (token, head) row of n ----
template <typename Tx, typename Tz, typename Ty>
__global__ void __launch_bounds__(256) k_gated_rmsnorm(Ty *__restrict__ y, int ldy, const Tx *__restrict__ x, int ldx,
                                                       const Tz *__restrict__ z, int ldz, int T, int heads, int n,
                                                       const float *__restrict__ w, float eps) {
	pdl_trigger(); // in decode, the out_proj GEMV after it may start streaming its weights
	pdl_wait();    // x and z are the kernels before's outputs
	const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= T * heads)
		return;
	const int t = row / heads, h = row % heads;
	const Tx *xr = x + (size_t)t * ldx + (size_t)h * n;
	const Tz *zr = z + (size_t)t * ldz + (size_t)h * n;
	Ty *yr = y + (size_t)t * ldy + (size_t)h * n;
	float ss = 0.0f;
#pragma unroll 4 // a head's loads in flight together (n = 128: one round)
	for (int i = lane; i < n; i += 32) {
		const float v = ldf(xr + i);
		ss = fmaf(v, v, ss);
	}
	const float inv = rsqrtf(warp_sum(ss) / (float)n + eps);
#pragma unroll 4
	for (int i = lane; i < n; i += 32)
		stf(yr + i, w[i] * (ldf(xr + i) * inv) * silu(ldf(zr + i)));
}

// The bf16 form for rows of n = 8·L: L lanes a row, each with one 16-byte
// load of x and one of z issued together before the reduction (the scalar
// form above has 2-byte loads and fetches z only after it), and one 16-byte
// store. Groups past the last row still take part in the shuffles.
template <int L>
__global__ void __launch_bounds__(256) k_gated_rmsnorm_v(bf16_t *__restrict__ y, int ldy, const bf16_t *__restrict__ x,
                                                         int ldx, const bf16_t *__restrict__ z, int ldz, int T,
                                                         int heads, const float *__restrict__ w, float eps) {
	static_assert(L == 8 || L == 16 || L == 32, "lanes a row: a power of two within a warp");
	pdl_trigger();
	pdl_wait();
	const int g = blockIdx.x * 256 + threadIdx.x, row = g / L, c = (g % L) * 8;
	const bool live = row < T * heads;
	const int t = live ? row / heads : 0, h = live ? row % heads : 0;
	uint4 xv = make_uint4(0, 0, 0, 0), zv = xv;
	if (live) {
		xv = ld_cg((const uint4 *)(x + (size_t)t * ldx + (size_t)h * 8 * L + c));
		zv = ld_cg((const uint4 *)(z + (size_t)t * ldz + (size_t)h * 8 * L + c));
	}
	const unsigned xw[4] = {xv.x, xv.y, xv.z, xv.w}, zw[4] = {zv.x, zv.y, zv.z, zv.w};
	float xf[8], ss = 0.0f;
#pragma unroll
	for (int j = 0; j < 4; j++) {
		xf[2 * j] = __uint_as_float(xw[j] << 16);
		xf[2 * j + 1] = __uint_as_float(xw[j] & 0xffff0000u);
		ss = fmaf(xf[2 * j], xf[2 * j], ss);
		ss = fmaf(xf[2 * j + 1], xf[2 * j + 1], ss);
	}
#pragma unroll
	for (int o = L / 2; o > 0; o >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if (!live)
		return;
	const float inv = rsqrtf(ss / (float)(8 * L) + eps);
	const float4 w0 = *(const float4 *)(w + c), w1 = *(const float4 *)(w + c + 4);
	const float wf[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
	unsigned yw[4];
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const float z0 = __uint_as_float(zw[j] << 16), z1 = __uint_as_float(zw[j] & 0xffff0000u);
		yw[j] = pack_bf2(wf[2 * j] * (xf[2 * j] * inv) * silu(z0), wf[2 * j + 1] * (xf[2 * j + 1] * inv) * silu(z1));
	}
	*(uint4 *)(y + (size_t)t * ldy + (size_t)h * 8 * L + c) = make_uint4(yw[0], yw[1], yw[2], yw[3]);
}

template <int L>
static int gated_rmsnorm_v(void *y, int ldy, const void *x, int ldx, const void *z, int ldz, int t, int heads,
                           const float *w, float eps, cudaStream_t st) {
	return launch_pdl(k_gated_rmsnorm_v<L>, dim3(cdiv((size_t)t * heads * L, 256)), dim3(256), 0, st, (bf16_t *)y, ldy,
	                  (const bf16_t *)x, ldx, (const bf16_t *)z, ldz, t, heads, w, eps);
}

int launch_gated_rmsnorm(void *y, int ybf, int ldy, const void *x, int xbf, int ldx, const void *z, int zbf, int ldz,
                         int t, int heads, int n, const float *w, float eps, cudaStream_t st) {
	QR_ARG(t >= 0 && heads > 0 && n > 0, "gated rmsnorm: bad dims");
	if (t == 0)
		return QR_OK;
	const bool vec = xbf && zbf && ybf && (n == 64 || n == 128 || n == 256) && ldx % 8 == 0 && ldy % 8 == 0 &&
	                 ldz % 8 == 0 && (((uintptr_t)x | (uintptr_t)y | (uintptr_t)z | (uintptr_t)w) & 15) == 0;
	if (vec && (size_t)t * heads * (n / 8) < (size_t)1 << 31) {
		switch (n) {
		case 64: return gated_rmsnorm_v<8>(y, ldy, x, ldx, z, ldz, t, heads, w, eps, st);
		case 128: return gated_rmsnorm_v<16>(y, ldy, x, ldx, z, ldz, t, heads, w, eps, st);
		default: return gated_rmsnorm_v<32>(y, ldy, x, ldx, z, ldz, t, heads, w, eps, st);
		}
	}
	const unsigned nb = cdiv((size_t)t * heads, 8);
	if (!xbf && !zbf && !ybf)
		return launch_pdl(k_gated_rmsnorm<float, float, float>, dim3(nb), dim3(256), 0, st, (float *)y, ldy,
		                  (const float *)x, ldx, (const float *)z, ldz, t, heads, n, w, eps);
	if (xbf && zbf && ybf)
		return launch_pdl(k_gated_rmsnorm<bf16_t, bf16_t, bf16_t>, dim3(nb), dim3(256), 0, st, (bf16_t *)y, ldy,
		                  (const bf16_t *)x, ldx, (const bf16_t *)z, ldz, t, heads, n, w, eps);
	QR_ARG(false, "gated rmsnorm: mixed precisions not built");
	return QR_EARG;
}

// ---- partial rotate-half RoPE: thread per (token, head, pair) ----
template <typename T>
__global__ void k_rope(T *x, const int32_t *__restrict__ pos, int Tn, int heads, int d, int rot, float theta) {
	const int half = rot / 2;
	const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	if (i >= (size_t)Tn * heads * half)
		return;
	const int p = i % half;
	const size_t th = i / half; // token * heads + head
	const int t = (int)(th / heads);
	const float inv = 1.0f / powf(theta, (float)(2 * p) / (float)rot);
	const float ang = (float)pos[t] * inv;
	float s, c;
	sincosf(ang, &s, &c);
	T *xr = x + th * d;
	const float x1 = ldf(xr + p), x2 = ldf(xr + p + half);
	stf(xr + p, x1 * c - x2 * s);
	stf(xr + p + half, x2 * c + x1 * s);
}

int launch_rope(void *x, int bf, const int32_t *pos, int t, int heads, int d, int rot, float theta, cudaStream_t st) {
	QR_ARG(t >= 0 && heads > 0 && rot > 0 && rot % 2 == 0 && rot <= d, "rope: bad dims rot=%d d=%d", rot, d);
	const size_t n = (size_t)t * heads * (rot / 2);
	if (n == 0)
		return QR_OK;
	if (bf)
		k_rope<bf16_t><<<cdiv(n, 256), 256, 0, st>>>((bf16_t *)x, pos, t, heads, d, rot, theta);
	else
		k_rope<float><<<cdiv(n, 256), 256, 0, st>>>((float *)x, pos, t, heads, d, rot, theta);
	QR_CKL("rope");
	return QR_OK;
}

// ---- SwiGLU ----
template <typename T> __global__ void k_swiglu(T *y, const T *__restrict__ gt, const T *__restrict__ up, size_t n) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		stf(y + i, silu(ldf(gt + i)) * ldf(up + i));
}

int launch_swiglu(void *y, const void *gate, const void *up, size_t n, int bf, cudaStream_t st) {
	if (n == 0)
		return QR_OK;
	const unsigned nb = cdiv(n, 256) > 4096 ? 4096 : cdiv(n, 256);
	if (bf)
		k_swiglu<bf16_t><<<nb, 256, 0, st>>>((bf16_t *)y, (const bf16_t *)gate, (const bf16_t *)up, n);
	else
		k_swiglu<float><<<nb, 256, 0, st>>>((float *)y, (const float *)gate, (const float *)up, n);
	QR_CKL("swiglu");
	return QR_OK;
}

// ---- host entry points ----

extern "C" int qr_rmsnorm(float *y, const float *x, int rows, int n, const float *w, float eps, int one_plus) {
	QR_TRY(qr_require());
	QR_ARG(rows >= 0 && n > 0, "qr_rmsnorm: bad dims");
	DevBuf dx, dw, dy;
	QR_TRY(upload(dx, x, (size_t)rows * n));
	QR_TRY(upload(dw, w, (size_t)n));
	QR_TRY(dy.alloc((size_t)rows * n * 4));
	QR_TRY(qr_fill_nan(dy.p, (size_t)rows * n * 4, g_qr.stream));
	QR_TRY(launch_rmsnorm(dy.p, 0, dx.p, 0, rows, n, dw.as<float>(), eps, one_plus, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(y, dy, (size_t)rows * n);
}

extern "C" int qr_gated_rmsnorm(float *y, const float *x, const float *z, int t, int heads, int n, const float *w,
                                float eps, int bf16) {
	QR_TRY(qr_require());
	QR_ARG(t >= 0 && heads > 0 && n > 0, "qr_gated_rmsnorm: bad dims");
	const size_t m = (size_t)t * heads * n;
	DevBuf dx, dz, dw, dy, bx, bz, by;
	QR_TRY(upload(dx, x, m));
	QR_TRY(upload(dz, z, m));
	QR_TRY(upload(dw, w, (size_t)n));
	QR_TRY(dy.alloc(m * 4));
	QR_TRY(qr_fill_nan(dy.p, m * 4, g_qr.stream));
	void *xp = dx.p, *zp = dz.p, *yp = dy.p;
	if (bf16) { // the layer's form: bf16 in and out, as decode and prefill run it
		QR_TRY(bx.alloc(m * 2));
		QR_TRY(bz.alloc(m * 2));
		QR_TRY(by.alloc(m * 2));
		QR_TRY(qr_fill_nan(by.p, m * 2, g_qr.stream));
		QR_TRY(qr_convert_f32_bf16(bx.as<bf16_t>(), dx.as<float>(), m, g_qr.stream));
		QR_TRY(qr_convert_f32_bf16(bz.as<bf16_t>(), dz.as<float>(), m, g_qr.stream));
		xp = bx.p, zp = bz.p, yp = by.p;
	}
	const int ld = heads * n;
	QR_TRY(launch_gated_rmsnorm(yp, bf16, ld, xp, bf16, ld, zp, bf16, ld, t, heads, n, dw.as<float>(), eps, g_qr.stream));
	if (bf16)
		QR_TRY(qr_convert_bf16_f32(dy.as<float>(), by.as<bf16_t>(), m, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(y, dy, m);
}

extern "C" int qr_rope(float *x, const int32_t *pos, int t, int heads, int d, int rot, float theta) {
	QR_TRY(qr_require());
	QR_ARG(t >= 0 && heads > 0 && d > 0, "qr_rope: bad dims");
	DevBuf dx, dp;
	QR_TRY(upload(dx, x, (size_t)t * heads * d));
	QR_TRY(upload(dp, pos, (size_t)t));
	QR_TRY(launch_rope(dx.p, 0, dp.as<int32_t>(), t, heads, d, rot, theta, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(x, dx, (size_t)t * heads * d);
}

extern "C" int qr_swiglu(float *y, const float *gate, const float *up, size_t n) {
	QR_TRY(qr_require());
	DevBuf dg, du, dy;
	QR_TRY(upload(dg, gate, n));
	QR_TRY(upload(du, up, n));
	QR_TRY(dy.alloc(n * 4));
	QR_TRY(qr_fill_nan(dy.p, n * 4, g_qr.stream));
	QR_TRY(launch_swiglu(dy.p, dg.p, du.p, n, 0, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(y, dy, n);
}
