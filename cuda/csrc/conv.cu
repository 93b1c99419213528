// conv.cu: fused causal depthwise conv + SiLU (prefill and decode update).
//
// The plain form: each thread owns VEC adjacent channels and a run of TT
// time steps, with a right-aligned register window of the last KMAX inputs
// per channel, so every input is read once from memory (plus KMAX-1 halo
// rows per run) and each output is written once: a single streaming pass.
// The tile form (bf16 in and out, the default from kConvTileMinT rows) does
// the same arithmetic with every load of a run issued before the first
// product; both give the same bits (TestConvShapesAgree).
#include "common.cuh"
#include "internal.cuh"

// SiLU for a bf16 result: the fast exp and divide (a few ulp of fp32) sit
// far below bf16's rounding and halve the kernel's arithmetic; for a
// → -∞, exp(-a) = ∞ and the quotient is -0. fp32 results keep silu().
template <typename Tout> __device__ __forceinline__ float conv_silu(float a) {
	if constexpr (sizeof(Tout) == 2)
		return __fdividef(a, 1.0f + __expf(-a));
	else
		return silu(a);
}

template <int VEC> struct Vec;
template <> struct Vec<1> {
	static __device__ __forceinline__ void load(float o[1], const float *p) { o[0] = *p; }
	static __device__ __forceinline__ void load(float o[1], const bf16_t *p) { o[0] = bf2f(*p); }
	static __device__ __forceinline__ void store(float *p, const float v[1]) { *p = v[0]; }
	static __device__ __forceinline__ void store(bf16_t *p, const float v[1]) { *p = f2bf(v[0]); }
};
template <> struct Vec<8> { // bf16 x 8 = 16 bytes
	static __device__ __forceinline__ void load(float o[8], const bf16_t *p) {
		uint4 u = *(const uint4 *)p;
		unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
		for (int i = 0; i < 4; i++) {
			o[2 * i] = __uint_as_float(w[i] << 16);
			o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		}
	}
	static __device__ __forceinline__ void store(bf16_t *p, const float v[8]) {
		uint4 u;
		u.x = pack_bf2(v[0], v[1]);
		u.y = pack_bf2(v[2], v[3]);
		u.z = pack_bf2(v[4], v[5]);
		u.w = pack_bf2(v[6], v[7]);
		*(uint4 *)p = u;
	}
};

// x [t, ldx], y [t, ldy], w [c, kw], state [kw, c]; kw <= KMAX.
template <typename Tin, typename Tout, int VEC, int KMAX, int U>
__global__ void __launch_bounds__(128) k_conv_silu(Tout *__restrict__ y, int ldy, const Tin *__restrict__ x, int ldx,
                                                   int T, int C, const float *__restrict__ w, int kw,
                                                   const Tin *__restrict__ state, int TT) {
	const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
	if (c0 >= C)
		return;
	const int t0 = blockIdx.y * TT;
	const int t1 = min(T, t0 + TT);
	// Right-aligned taps: W[KMAX-kw+j] = w[c][j], zeros before.
	float W[KMAX][VEC], H[KMAX][VEC];
#pragma unroll
	for (int i = 0; i < KMAX; i++) {
		const int j = i - (KMAX - kw);
#pragma unroll
		for (int v = 0; v < VEC; v++)
			W[i][v] = j >= 0 ? w[(size_t)(c0 + v) * kw + j] : 0.0f;
	}
	// Window H[i] = input at time t0 - (KMAX-1) + i for i < KMAX-1.
#pragma unroll
	for (int i = 0; i < KMAX - 1; i++) {
		const int tau = t0 - (KMAX - 1) + i;
		if (tau >= 0) {
			Vec<VEC>::load(H[i], x + (size_t)tau * ldx + c0);
		} else if (tau >= -kw && state != nullptr) {
			Vec<VEC>::load(H[i], state + (size_t)(kw + tau) * C + c0);
		} else {
#pragma unroll
			for (int v = 0; v < VEC; v++)
				H[i][v] = 0.0f;
		}
	}
	// Loads for U steps go out together so each thread keeps U rows in
	// flight (U = 1 is the plain loop).
	for (int tb = t0; tb < t1; tb += U) {
		float in[U][VEC];
#pragma unroll
		for (int u = 0; u < U; u++)
			if (tb + u < t1)
				Vec<VEC>::load(in[u], x + (size_t)(tb + u) * ldx + c0);
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (tb + u >= t1)
				break;
#pragma unroll
			for (int v = 0; v < VEC; v++)
				H[KMAX - 1][v] = in[u][v];
			float o[VEC];
#pragma unroll
			for (int v = 0; v < VEC; v++) {
				float acc = 0.0f;
#pragma unroll
				for (int i = 0; i < KMAX; i++)
					acc = fmaf(W[i][v], H[i][v], acc);
				o[v] = conv_silu<Tout>(acc);
			}
			Vec<VEC>::store(y + (size_t)(tb + u) * ldy + c0, o);
#pragma unroll
			for (int i = 0; i < KMAX - 1; i++)
#pragma unroll
				for (int v = 0; v < VEC; v++)
					H[i][v] = H[i + 1][v];
		}
	}
}

// The all-loads-first form (bf16, 8 channels a thread): a thread issues
// the TT + KMAX - 1 row loads of its run before the first product, so that
// many 16-byte loads are in flight per thread, not one; the rows stay packed
// until used. STREAM marks the loads and stores evict-first, since no row is
// read again after its run and its halo.
__device__ __forceinline__ float bf_lane(const uint4 &u, int v) {
	const unsigned w = v < 2 ? u.x : v < 4 ? u.y : v < 6 ? u.z : u.w;
	return __uint_as_float(v & 1 ? w & 0xffff0000u : w << 16);
}
__device__ __forceinline__ uint4 ld_stream16(const uint4 *p) {
	uint4 u;
	asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
	return u;
}
__device__ __forceinline__ void st_stream16(uint4 *p, const uint4 &u) {
	asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
	             : "memory");
}
template <int KMAX, int TT, bool STREAM>
__global__ void __launch_bounds__(128) k_conv_silu_tile(bf16_t *__restrict__ y, int ldy, const bf16_t *__restrict__ x,
                                                        int ldx, int T, int C, const float *__restrict__ w, int kw,
                                                        const bf16_t *__restrict__ state) {
	constexpr int R = TT + KMAX - 1;
	const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
	if (c0 >= C)
		return;
	const int t0 = blockIdx.y * TT;
	uint4 raw[R]; // raw[i] = input row t0 - (KMAX-1) + i
#pragma unroll
	for (int i = 0; i < R; i++) {
		const int tau = t0 - (KMAX - 1) + i;
		const uint4 *src = nullptr;
		if (tau >= 0 && tau < T)
			src = (const uint4 *)(x + (size_t)tau * ldx + c0);
		else if (tau < 0 && tau >= -kw && state != nullptr)
			src = (const uint4 *)(state + (size_t)(kw + tau) * C + c0);
		raw[i] = src == nullptr ? make_uint4(0, 0, 0, 0) : STREAM ? ld_stream16(src) : __ldg(src);
	}
	float W[KMAX][8]; // right-aligned taps, zeros before
#pragma unroll
	for (int i = 0; i < KMAX; i++) {
		const int j = i - (KMAX - kw);
#pragma unroll
		for (int v = 0; v < 8; v++)
			W[i][v] = j >= 0 ? w[(size_t)(c0 + v) * kw + j] : 0.0f;
	}
#pragma unroll
	for (int j = 0; j < TT; j++) {
		float o[8];
#pragma unroll
		for (int v = 0; v < 8; v++) {
			float acc = 0.0f;
#pragma unroll
			for (int i = 0; i < KMAX; i++)
				acc = fmaf(W[i][v], bf_lane(raw[j + i], v), acc);
			o[v] = conv_silu<bf16_t>(acc);
		}
		uint4 u;
		u.x = pack_bf2(o[0], o[1]);
		u.y = pack_bf2(o[2], o[3]);
		u.z = pack_bf2(o[4], o[5]);
		u.w = pack_bf2(o[6], o[7]);
		uint4 *dst = (uint4 *)(y + (size_t)(t0 + j) * ldy + c0);
		if (t0 + j >= T)
			continue; // past the end: nothing to store (the loop stays unrolled)
		if (STREAM)
			st_stream16(dst, u);
		else
			*dst = u;
	}
}

// state_out[j] = row T-kw+j of [state_in; x].
template <typename T>
__global__ void k_conv_state(T *__restrict__ so, const T *__restrict__ si, const T *__restrict__ x, int ldx, int Tn,
                             int C, int kw) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= kw * C)
		return;
	const int j = i / C, c = i % C;
	const int tau = Tn - kw + j;
	T v;
	if (tau >= 0)
		v = x[(size_t)tau * ldx + c];
	else if (si != nullptr)
		v = si[(size_t)(kw + tau) * C + c];
	else
		v = T(0);
	so[i] = v;
}

// Decode conv, in place: state [K, C] holds the last K inputs (oldest
// first). Each thread owns one channel, so the shift needs no second buffer
// and the kernel replays in a graph. Batch row r (blockIdx.y) reads x + r·ldx,
// writes u + r·ldu and keeps its own state at state + r·K·C.
__global__ void k_conv_decode(bf16_t *__restrict__ u, int ldu, bf16_t *__restrict__ state,
                              const bf16_t *__restrict__ x, int ldx, const float *__restrict__ w, int C, int K) {
	pdl_trigger();
	pdl_wait(); // x is the kernel before's output
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	const size_t r = blockIdx.y;
	u += r * ldu;
	x += r * ldx;
	state += r * K * C;
	bf16_t win[8];
	float acc = 0.0f;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		if (j < K) {
			win[j] = j + 1 < K ? state[(size_t)(j + 1) * C + c] : x[c];
			acc = fmaf(w[(size_t)c * K + j], bf2f(win[j]), acc);
		}
	}
	u[c] = f2bf(silu(acc));
#pragma unroll
	for (int j = 0; j < 8; j++)
		if (j < K)
			state[(size_t)j * C + c] = win[j];
}

int launch_conv_decode(bf16_t *u, bf16_t *state, const bf16_t *x, const float *w, int C, int K, cudaStream_t st) {
	return launch_conv_decode_rows(u, C, state, x, C, w, C, K, 1, st);
}

int launch_conv_decode_rows(bf16_t *u, int ldu, bf16_t *state, const bf16_t *x, int ldx, const float *w, int C,
                            int K, int rows, cudaStream_t st) {
	QR_ARG(K > 0 && K <= 8, "conv decode: %d taps (at most 8)", K);
	QR_ARG(rows >= 1 && rows <= 65535, "conv decode: %d rows", rows);
	return launch_pdl(k_conv_decode, dim3(cdiv(C, 128), rows), dim3(128), 0, st, u, ldu, state, x, ldx, w, C, K);
}

// Launch shape for bench and tests: U rows in flight per thread (8 and 9:
// the tile form, with and without streaming hints), TT time steps per
// thread. 0 is the default, the measured best for the 27B conv.
int g_conv_u = 0, g_conv_tt = 0;

// Below this many rows the plain form's shorter runs fill the chip better.
static constexpr int kConvTileMinT = 512;

template <typename Tin, typename Tout, int VEC, int KMAX, int U>
static int conv_launch_u(Tout *y, int ldy, const Tin *x, int ldx, int T, int C, const float *w, int kw, const Tin *si,
                         int TT, cudaStream_t st) {
	dim3 grid(cdiv((size_t)C / VEC, 128), cdiv(T, TT));
	k_conv_silu<Tin, Tout, VEC, KMAX, U><<<grid, 128, 0, st>>>(y, ldy, x, ldx, T, C, w, kw, si, TT);
	QR_CKL("conv_silu");
	return QR_OK;
}

template <int KMAX, int TT, bool STREAM>
static int conv_launch_tile(bf16_t *y, int ldy, const bf16_t *x, int ldx, int T, int C, const float *w, int kw,
                            const bf16_t *si, cudaStream_t st) {
	dim3 grid(cdiv((size_t)C / 8, 128), cdiv(T, TT));
	k_conv_silu_tile<KMAX, TT, STREAM><<<grid, 128, 0, st>>>(y, ldy, x, ldx, T, C, w, kw, si);
	QR_CKL("conv_silu_tile");
	return QR_OK;
}

// The tile form's shapes: g_conv_u 8 (streaming hints, the default) or 9
// (plain loads and stores), 16 steps a thread. Runs of 4 and 8 steps were
// measured slower at every length (docs/perf-cuda.md) and are not built.
template <int KMAX>
static int conv_tile_dispatch(bf16_t *y, int ldy, const bf16_t *x, int ldx, int T, int C, const float *w, int kw,
                              const bf16_t *si, int u, int tt, cudaStream_t st) {
	QR_ARG((u == 8 || u == 9) && tt == 16, "conv: tile shape %d%02d not built (816 and 916 only)", u, tt);
	return u == 8 ? conv_launch_tile<KMAX, 16, true>(y, ldy, x, ldx, T, C, w, kw, si, st)
	              : conv_launch_tile<KMAX, 16, false>(y, ldy, x, ldx, T, C, w, kw, si, st);
}

template <typename Tin, typename Tout, int VEC, int KMAX>
static int conv_launch(Tout *y, int ldy, const Tin *x, int ldx, int T, int C, const float *w, int kw, const Tin *si,
                       cudaStream_t st) {
	if constexpr (VEC == 8) {
		// bf16 in and out: the tile form with streaming hints, 16 steps a
		// thread, from kConvTileMinT rows (docs/perf-cuda.md, "conv").
		if (g_conv_u >= 8)
			return conv_tile_dispatch<KMAX>(y, ldy, x, ldx, T, C, w, kw, si, g_conv_u, g_conv_tt, st);
		if (g_conv_u == 0 && T >= kConvTileMinT)
			return conv_launch_tile<KMAX, 16, true>(y, ldy, x, ldx, T, C, w, kw, si, st);
	}
	// Short runs for short inputs so the grid still fills the chip.
	int TT = g_conv_tt ? g_conv_tt : (T >= 4096 ? 64 : (T >= 512 ? 16 : 4));
	const int u = g_conv_u ? g_conv_u : 1;
	if (u >= 4)
		return conv_launch_u<Tin, Tout, VEC, KMAX, 4>(y, ldy, x, ldx, T, C, w, kw, si, TT, st);
	if (u == 2)
		return conv_launch_u<Tin, Tout, VEC, KMAX, 2>(y, ldy, x, ldx, T, C, w, kw, si, TT, st);
	return conv_launch_u<Tin, Tout, VEC, KMAX, 1>(y, ldy, x, ldx, T, C, w, kw, si, TT, st);
}

template <typename Tin, typename Tout, int VEC>
static int conv_dispatch_k(Tout *y, int ldy, const Tin *x, int ldx, int T, int C, const float *w, int kw,
                           const Tin *si, cudaStream_t st) {
	if (kw <= 4)
		return conv_launch<Tin, Tout, VEC, 4>(y, ldy, x, ldx, T, C, w, kw, si, st);
	return conv_launch<Tin, Tout, VEC, 8>(y, ldy, x, ldx, T, C, w, kw, si, st);
}

int launch_conv(void *y, int ybf, int ldy, const void *x, int xbf, int ldx, int t, int c, const float *w, int kw,
                const void *state_in, void *state_out, cudaStream_t st) {
	QR_ARG(t >= 0 && c > 0 && kw > 0 && kw <= 8, "conv: bad dims t=%d c=%d kw=%d (kw <= 8)", t, c, kw);
	if (t > 0) {
		if (xbf && ybf) {
			const bool vec = c % 8 == 0 && ldx % 8 == 0 && ldy % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
			                 ((uintptr_t)y & 15) == 0 && (state_in == nullptr || ((uintptr_t)state_in & 15) == 0);
			if (vec)
				QR_TRY((conv_dispatch_k<bf16_t, bf16_t, 8>((bf16_t *)y, ldy, (const bf16_t *)x, ldx, t, c, w, kw,
				                                          (const bf16_t *)state_in, st)));
			else
				QR_TRY((conv_dispatch_k<bf16_t, bf16_t, 1>((bf16_t *)y, ldy, (const bf16_t *)x, ldx, t, c, w, kw,
				                                          (const bf16_t *)state_in, st)));
		} else if (!xbf && !ybf) {
			QR_TRY((conv_dispatch_k<float, float, 1>((float *)y, ldy, (const float *)x, ldx, t, c, w, kw,
			                                        (const float *)state_in, st)));
		} else {
			QR_ARG(false, "conv: mixed f32/bf16 input and output not built");
		}
	}
	if (state_out != nullptr) {
		const unsigned nb = cdiv((size_t)kw * c, 256);
		if (xbf)
			k_conv_state<bf16_t><<<nb, 256, 0, st>>>((bf16_t *)state_out, (const bf16_t *)state_in,
			                                          (const bf16_t *)x, ldx, t, c, kw);
		else
			k_conv_state<float>
			    <<<nb, 256, 0, st>>>((float *)state_out, (const float *)state_in, (const float *)x, ldx, t, c, kw);
		QR_CKL("conv_state");
	}
	return QR_OK;
}

extern "C" int qr_conv_forward(float *y, const float *x, int t, int c, const float *w, int kw, float *state) {
	QR_TRY(qr_require());
	QR_ARG(t >= 0 && c > 0 && kw > 0 && kw <= 8, "qr_conv_forward: bad dims t=%d c=%d kw=%d", t, c, kw);
	DevBuf dx, dy, dw, dsi, dso;
	QR_TRY(upload(dx, x, (size_t)t * c));
	QR_TRY(upload(dw, w, (size_t)c * kw));
	QR_TRY(upload(dsi, state, (size_t)kw * c));
	QR_TRY(dy.alloc((size_t)t * c * 4));
	QR_TRY(dso.alloc((size_t)kw * c * 4));
	QR_TRY(qr_fill_nan(dy.p, (size_t)t * c * 4, g_qr.stream));
	QR_TRY(qr_fill_nan(dso.p, (size_t)kw * c * 4, g_qr.stream));
	QR_TRY(launch_conv(dy.p, 0, c, dx.p, 0, c, t, c, dw.as<float>(), kw, dsi.p, dso.p, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	QR_TRY(download(y, dy, (size_t)t * c));
	return download(state, dso, (size_t)kw * c);
}
