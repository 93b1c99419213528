// ops.cu: the small fused kernels around the mixers: RMSNorm (plain and
// 1+w), gated RMSNorm + SiLU(z), the GDN prep (q/k L2 norm and gates),
// partial rotate-half RoPE, SwiGLU, the decode GEMV, and fp32 flash-style
// causal GQA attention; with their host entry points.
#include <math.h>

#include "common.cuh"
#include "internal.cuh"

int qr_gdn_init();
int qr_attn_init();

int qr_kernels_init() {
	QR_TRY(qr_gdn_init());
	return qr_attn_init();
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

int launch_rmsnorm(void *y, int ybf, const void *x, int xbf, int rows, int n, const float *w, float eps, int one_plus,
                   cudaStream_t st) {
	QR_ARG(rows >= 0 && n > 0, "rmsnorm: bad dims");
	if (rows == 0)
		return QR_OK;
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
	const int row = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= T * heads)
		return;
	const int t = row / heads, h = row % heads;
	const Tx *xr = x + (size_t)t * ldx + (size_t)h * n;
	const Tz *zr = z + (size_t)t * ldz + (size_t)h * n;
	Ty *yr = y + (size_t)t * ldy + (size_t)h * n;
	float ss = 0.0f;
	for (int i = lane; i < n; i += 32) {
		const float v = ldf(xr + i);
		ss = fmaf(v, v, ss);
	}
	const float inv = rsqrtf(warp_sum(ss) / (float)n + eps);
	for (int i = lane; i < n; i += 32)
		stf(yr + i, w[i] * (ldf(xr + i) * inv) * silu(ldf(zr + i)));
}

int launch_gated_rmsnorm(void *y, int ybf, int ldy, const void *x, int xbf, int ldx, const void *z, int zbf, int ldz,
                         int t, int heads, int n, const float *w, float eps, cudaStream_t st) {
	QR_ARG(t >= 0 && heads > 0 && n > 0, "gated rmsnorm: bad dims");
	if (t == 0)
		return QR_OK;
	const unsigned nb = cdiv((size_t)t * heads, 8);
	if (!xbf && !zbf && !ybf)
		k_gated_rmsnorm<float, float, float><<<nb, 256, 0, st>>>((float *)y, ldy, (const float *)x, ldx,
		                                                         (const float *)z, ldz, t, heads, n, w, eps);
	else if (xbf && zbf && ybf)
		k_gated_rmsnorm<bf16_t, bf16_t, bf16_t><<<nb, 256, 0, st>>>((bf16_t *)y, ldy, (const bf16_t *)x, ldx,
		                                                            (const bf16_t *)z, ldz, t, heads, n, w, eps);
	else
		QR_ARG(false, "gated rmsnorm: mixed precisions not built");
	QR_CKL("gated_rmsnorm");
	return QR_OK;
}

// ---- GDN prep: one block (8 warps) per token ----
__global__ void __launch_bounds__(256) k_gdn_prep_layer(bf16_t *__restrict__ qn, bf16_t *__restrict__ kn,
                                                        float *__restrict__ g, float *__restrict__ beta,
                                                        const bf16_t *__restrict__ u, int ldu,
                                                        const bf16_t *__restrict__ ba, int ldp, int nk, int nv,
                                                        int dk, const float *__restrict__ a_log,
                                                        const float *__restrict__ dt_bias) {
	const int t = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const float qscale = rsqrtf((float)dk);
	for (int j = w; j < 2 * nk; j += 8) { // heads 0..nk-1 are q, nk..2nk-1 are k
		const bf16_t *src = u + (size_t)t * ldu + (size_t)j * dk;
		float ss = 0.0f;
		for (int i = lane; i < dk; i += 32) {
			const float v = bf2f(src[i]);
			ss = fmaf(v, v, ss);
		}
		float inv = rsqrtf(warp_sum(ss) + 1e-6f);
		bf16_t *dst;
		if (j < nk) {
			inv *= qscale;
			dst = qn + ((size_t)t * nk + j) * dk;
		} else {
			dst = kn + ((size_t)t * nk + (j - nk)) * dk;
		}
		for (int i = lane; i < dk; i += 32)
			dst[i] = f2bf(bf2f(src[i]) * inv);
	}
	for (int h = threadIdx.x; h < nv; h += blockDim.x) {
		const float b = bf2f(ba[(size_t)t * ldp + h]);
		const float a = bf2f(ba[(size_t)t * ldp + nv + h]);
		beta[(size_t)t * nv + h] = 1.0f / (1.0f + expf(-b));
		g[(size_t)t * nv + h] = -expf(a_log[h]) * softplus(a + dt_bias[h]);
	}
}

int launch_gdn_prep(bf16_t *qn, bf16_t *kn, float *g, float *beta, const bf16_t *u, int ldu, const bf16_t *ba, int ldp,
                    int t, int nk, int nv, int dk, const float *a_log, const float *dt_bias, cudaStream_t st) {
	if (t == 0)
		return QR_OK;
	k_gdn_prep_layer<<<t, 256, 0, st>>>(qn, kn, g, beta, u, ldu, ba, ldp, nk, nv, dk, a_log, dt_bias);
	QR_CKL("gdn_prep_layer");
	return QR_OK;
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

// ---- decode GEMV: y[n] = W[n,:] . x, bf16, fp32 sums ----
// A decode step is bound by reading the weights once, so the kernel is
// shaped for bytes in flight: x is staged in shared memory once per block,
// each warp owns GEMV_ROWS rows, and every lane issues GEMV_U 16-byte loads
// per row before it uses any of them.
#define GEMV_MAXK 8192
template <int GEMV_ROWS, int GEMV_U>
__global__ void __launch_bounds__(256) k_gemv_bf16(bf16_t *__restrict__ y, const bf16_t *__restrict__ x,
                                                   const bf16_t *__restrict__ W, int N, int K) {
	__shared__ __align__(16) bf16_t xs[GEMV_MAXK];
	const int n8 = K / 8;
	for (int i = threadIdx.x; i < n8; i += blockDim.x)
		((uint4 *)xs)[i] = __ldg((const uint4 *)x + i);
	__syncthreads();
	const int lane = threadIdx.x & 31;
	const int row0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * GEMV_ROWS;
	if (row0 >= N)
		return;
	const uint4 *wr[GEMV_ROWS];
#pragma unroll
	for (int r = 0; r < GEMV_ROWS; r++)
		wr[r] = (const uint4 *)(W + (size_t)min(row0 + r, N - 1) * K);
	float acc[GEMV_ROWS];
#pragma unroll
	for (int r = 0; r < GEMV_ROWS; r++)
		acc[r] = 0.0f;
	for (int base = lane; base < n8; base += 32 * GEMV_U) {
		uint4 a[GEMV_ROWS][GEMV_U];
#pragma unroll
		for (int u = 0; u < GEMV_U; u++)
#pragma unroll
			for (int r = 0; r < GEMV_ROWS; r++)
				if (base + 32 * u < n8)
					a[r][u] = __ldg(wr[r] + base + 32 * u);
#pragma unroll
		for (int u = 0; u < GEMV_U; u++) {
			if (base + 32 * u >= n8)
				break;
			const uint4 b = ((const uint4 *)xs)[base + 32 * u];
			const unsigned bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
			for (int r = 0; r < GEMV_ROWS; r++) {
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
	for (int r = 0; r < GEMV_ROWS; r++) {
		const float s = warp_sum(acc[r]);
		if (lane == 0 && row0 + r < N)
			y[row0 + r] = f2bf(s);
	}
}

int launch_gemv_bf16(bf16_t *y, const bf16_t *x, const bf16_t *w, int n, int k, cudaStream_t st) {
	QR_ARG(k % 8 == 0 && k <= GEMV_MAXK && ((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0,
	       "gemv: k=%d (multiple of 8, <= %d) or alignment", k, GEMV_MAXK);
	// Two rows per warp where there are rows to spare, one where the grid
	// would otherwise be too small to keep every SM's loads in flight.
	if (n >= 8192)
		k_gemv_bf16<2, 4><<<cdiv(n, 16), 256, 0, st>>>(y, x, w, n, k);
	else
		k_gemv_bf16<1, 8><<<cdiv(n, 8), 256, 0, st>>>(y, x, w, n, k);
	QR_CKL("gemv_bf16");
	return QR_OK;
}

// ---- fp32 causal GQA attention: one warp per (query, head) ----
// Lane l holds dims l, l+32, ... of q and of the running output; keys are
// visited in order with the online-softmax rescaling (flash style), so
// memory beyond the output is O(1).
#define ATT_MAXD 256
__global__ void __launch_bounds__(128) k_attention_f32(float *__restrict__ out, const float *__restrict__ q,
                                                       const float *__restrict__ k, const float *__restrict__ v, int T,
                                                       int S, int NH, int NKV, int D, float scale) {
	const int t = blockIdx.x * 4 + (threadIdx.x >> 5), h = blockIdx.y, lane = threadIdx.x & 31;
	if (t >= T)
		return;
	const int hk = h / (NH / NKV);
	constexpr int E = ATT_MAXD / 32;
	float qv[E], acc[E];
	const float *qr = q + ((size_t)t * NH + h) * D;
#pragma unroll
	for (int e = 0; e < E; e++) {
		const int i = lane + 32 * e;
		qv[e] = i < D ? qr[i] * scale : 0.0f;
		acc[e] = 0.0f;
	}
	float m = -INFINITY, l = 0.0f;
	const int last = S - T + t;
	for (int j = 0; j <= last; j++) {
		const float *kr = k + ((size_t)j * NKV + hk) * D;
		float s = 0.0f;
#pragma unroll
		for (int e = 0; e < E; e++) {
			const int i = lane + 32 * e;
			if (i < D)
				s = fmaf(qv[e], kr[i], s);
		}
		s = warp_sum(s);
		const float mn = fmaxf(m, s);
		const float corr = expf(m - mn), p = expf(s - mn);
		l = l * corr + p;
		const float *vr = v + ((size_t)j * NKV + hk) * D;
#pragma unroll
		for (int e = 0; e < E; e++) {
			const int i = lane + 32 * e;
			acc[e] = acc[e] * corr + (i < D ? p * vr[i] : 0.0f);
		}
		m = mn;
	}
	float *orow = out + ((size_t)t * NH + h) * D;
	const float il = 1.0f / l;
#pragma unroll
	for (int e = 0; e < E; e++) {
		const int i = lane + 32 * e;
		if (i < D)
			orow[i] = acc[e] * il;
	}
}

int launch_attention(float *out, const float *q, const float *k, const float *v, int t, int s, int nh, int nkv, int d,
                     float scale, cudaStream_t st) {
	QR_ARG(t >= 0 && s >= t && nh > 0 && nkv > 0 && nh % nkv == 0 && d > 0 && d <= ATT_MAXD,
	       "attention: bad dims t=%d s=%d nh=%d nkv=%d d=%d (d <= %d)", t, s, nh, nkv, d, ATT_MAXD);
	if (t == 0)
		return QR_OK;
	k_attention_f32<<<dim3(cdiv(t, 4), nh), 128, 0, st>>>(out, q, k, v, t, s, nh, nkv, d, scale);
	QR_CKL("attention_f32");
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

extern "C" int qr_gated_rmsnorm(float *y, const float *x, const float *z, int rows, int n, const float *w, float eps) {
	QR_TRY(qr_require());
	QR_ARG(rows >= 0 && n > 0, "qr_gated_rmsnorm: bad dims");
	DevBuf dx, dz, dw, dy;
	QR_TRY(upload(dx, x, (size_t)rows * n));
	QR_TRY(upload(dz, z, (size_t)rows * n));
	QR_TRY(upload(dw, w, (size_t)n));
	QR_TRY(dy.alloc((size_t)rows * n * 4));
	QR_TRY(qr_fill_nan(dy.p, (size_t)rows * n * 4, g_qr.stream));
	QR_TRY(launch_gated_rmsnorm(dy.p, 0, n, dx.p, 0, n, dz.p, 0, n, rows, 1, n, dw.as<float>(), eps, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(y, dy, (size_t)rows * n);
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

extern "C" int qr_attention_forward(float *out, const float *q, const float *k, const float *v, int t, int s, int nh,
                                    int nkv, int d, float scale) {
	QR_TRY(qr_require());
	QR_ARG(t >= 0 && s >= t && nh > 0 && nkv > 0 && d > 0, "qr_attention_forward: bad dims");
	const size_t nq = (size_t)t * nh * d, nk = (size_t)s * nkv * d;
	DevBuf dq, dk, dv, dout;
	QR_TRY(upload(dq, q, nq));
	QR_TRY(upload(dk, k, nk));
	QR_TRY(upload(dv, v, nk));
	QR_TRY(dout.alloc(nq * 4));
	QR_TRY(qr_fill_nan(dout.p, nq * 4, g_qr.stream));
	QR_TRY(launch_attention(dout.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>(), t, s, nh, nkv, d, scale,
	                        g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(out, dout, nq);
}
