// common.cuh: shared helpers for the qwenref CUDA kernels: error state,
// checked calls, RAII device buffers, bf16 bit helpers, tensor-core
// fragments (mma.sync m16n8k16), cp.async and a counter-based RNG.
#pragma once

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <stddef.h>

#include "qwenref_cuda.h"

typedef uint16_t bf16_t; // bf16 bit pattern; we never depend on cuda_bf16.h

// ---- error state (one message per host thread) ----
void qr_set_error(const char *fmt, ...);
int qr_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
int qr_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line);

#define QR_CK(call)                                                            \
	do {                                                                       \
		cudaError_t qr_e_ = (call);                                            \
		if (qr_e_ != cudaSuccess)                                              \
			return qr_cuda_fail(qr_e_, #call, __FILE__, __LINE__);             \
	} while (0)
#define QR_CKB(call)                                                           \
	do {                                                                       \
		cublasStatus_t qr_s_ = (call);                                         \
		if (qr_s_ != CUBLAS_STATUS_SUCCESS)                                    \
			return qr_cublas_fail(qr_s_, #call, __FILE__, __LINE__);           \
	} while (0)
// After a kernel launch: the launch error, not the kernel's completion.
#define QR_CKL(name) QR_CK(cudaGetLastError())
// Propagate a nonzero status from a helper returning int.
#define QR_TRY(call)                                                           \
	do {                                                                       \
		int qr_r_ = (call);                                                    \
		if (qr_r_ != QR_OK)                                                    \
			return qr_r_;                                                      \
	} while (0)
#define QR_ARG(cond, ...)                                                      \
	do {                                                                       \
		if (!(cond)) {                                                         \
			qr_set_error(__VA_ARGS__);                                         \
			return QR_EARG;                                                    \
		}                                                                      \
	} while (0)

// ---- library state ----
struct QrState {
	int ready;
	int device;
	cudaStream_t stream;
	cublasHandle_t blas;
	int sm_count;
	int pdl;         // programmatic dependent launch in use (sm_90+ code, unless QWENREF_CUDA_PDL=0)
	int ptx_version; // the PTX architecture of the loaded kernels (90 for sm_90 code, 80 from compute_80 PTX)
};
extern QrState g_qr;
int qr_require(); // QR_ESTATE unless qr_init succeeded

// ---- a device buffer freed on scope exit (host-API functions) ----
struct DevBuf {
	void *p = nullptr;
	size_t bytes = 0;
	DevBuf() {}
	DevBuf(const DevBuf &) = delete;
	DevBuf &operator=(const DevBuf &) = delete;
	~DevBuf() {
		if (p)
			cudaFree(p);
	}
	int alloc(size_t n) {
		bytes = n;
		if (n == 0)
			n = 16; // keep a valid pointer for empty tensors
		cudaError_t e = cudaMalloc(&p, n);
		if (e != cudaSuccess) {
			p = nullptr;
			return qr_cuda_fail(e, "cudaMalloc", __FILE__, __LINE__);
		}
		return QR_OK;
	}
	template <typename T> T *as() const { return (T *)p; }
};

// Allocate and copy host data in (n elements of T). Copies go through the
// library stream so they are ordered with its kernels (a plain cudaMemcpy
// from pageable memory may return before its DMA lands).
template <typename T> int upload(DevBuf &b, const T *src, size_t n) {
	QR_TRY(b.alloc(n * sizeof(T)));
	if (n)
		QR_CK(cudaMemcpyAsync(b.p, src, n * sizeof(T), cudaMemcpyHostToDevice, g_qr.stream));
	return QR_OK;
}
template <typename T> int download(T *dst, const DevBuf &b, size_t n) {
	if (n) {
		QR_CK(cudaMemcpyAsync(dst, b.p, n * sizeof(T), cudaMemcpyDeviceToHost, g_qr.stream));
		QR_CK(cudaStreamSynchronize(g_qr.stream));
	}
	return QR_OK;
}

// ---- bf16 and numeric helpers ----
__host__ __device__ __forceinline__ float bf2f(bf16_t h) {
#ifdef __CUDA_ARCH__
	return __uint_as_float(((unsigned)h) << 16);
#else
	union {
		unsigned u;
		float f;
	} c;
	c.u = ((unsigned)h) << 16;
	return c.f;
#endif
}
// Round to nearest even (the hardware cvt; NaN stays NaN, as torch and
// tensor.Float32ToBF16).
__device__ __forceinline__ bf16_t f2bf(float f) {
	unsigned short h;
	asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(f));
	return h;
}
// Two floats into one register of two bf16 (lo in the low half).
__device__ __forceinline__ unsigned pack_bf2(float lo, float hi) {
	unsigned r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}
__device__ __forceinline__ float silu(float a) { return a / (1.0f + expf(-a)); }
__device__ __forceinline__ float softplus(float a) { return a > 20.0f ? a : log1pf(expf(a)); }

// Generic load/store of one element as float, for templated kernels.
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const bf16_t *p) { return bf2f(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16_t *p, float v) { *p = f2bf(v); }

// ---- programmatic dependent launch (sm_90+; no-ops before) ----
// A kernel launched by launch_pdl may start while the kernel before it on
// the stream drains: it may read only what that kernel does not write
// (weights) until pdl_wait(), which waits for the whole previous grid to
// finish and its writes to be visible. pdl_trigger() lets a kernel's
// dependents launch once all its blocks have started; it changes nothing
// about what their pdl_wait() waits for.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A 16-byte load through L2 only (ld.global.cg), for data the kernel
// before wrote; volatile, so it stays after a pdl_wait().
__device__ __forceinline__ uint4 ld_cg(const uint4 *p) {
	uint4 r;
	asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
	return r;
}
// The same for four floats.
__device__ __forceinline__ float4 ld_cg4f(const float4 *p) {
	float4 r;
	asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
	return r;
}
// The 16-byte step of a bf16 dot product: acc += Σ w_i·x_i over the eight
// bf16 pairs of w and x, low half of each word first (the order every
// GEMV keeps, so their sums agree bit for bit).
__device__ __forceinline__ float dot8_bf16(float acc, uint4 w, uint4 x) {
	const unsigned ww[4] = {w.x, w.y, w.z, w.w}, xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
	for (int j = 0; j < 4; j++) {
		acc = fmaf(__uint_as_float(ww[j] << 16), __uint_as_float(xw[j] << 16), acc);
		acc = fmaf(__uint_as_float(ww[j] & 0xffff0000u), __uint_as_float(xw[j] & 0xffff0000u), acc);
	}
	return acc;
}
// kernel<<<grid, block, smem, st>>>(args…), allowed to overlap the kernel
// before it (when g_qr.pdl): every block of it must call pdl_wait() before
// touching that kernel's outputs.
template <typename... P, typename... A>
static int launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args) {
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = at;
	cfg.numAttrs = g_qr.pdl ? 1 : 0;
	QR_CK(cudaLaunchKernelEx(&cfg, kernel, args...));
	return QR_OK;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// a[r] = W row wr[r] · x over nc 16-byte chunks, summed over the warp:
// lane l takes chunks l, l + 32, … in ascending order with U of them in
// flight per row, so the bits do not depend on U or on how rows are split.
template <int NW, int U>
__device__ __forceinline__ void rows_dot(float (&a)[NW], const uint4 *const (&wr)[NW], const uint4 *xv, int nc,
                                         int lane) {
#pragma unroll
	for (int r = 0; r < NW; r++)
		a[r] = 0.0f;
	for (int base = lane; base < nc; base += 32 * U) {
		uint4 xq[U], wq[U][NW];
#pragma unroll
		for (int u = 0; u < U; u++)
			if (base + 32 * u < nc) {
				xq[u] = ld_cg(xv + base + 32 * u);
#pragma unroll
				for (int r = 0; r < NW; r++)
					wq[u][r] = __ldg(wr[r] + base + 32 * u);
			}
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (base + 32 * u >= nc)
				break;
#pragma unroll
			for (int r = 0; r < NW; r++)
				a[r] = dot8_bf16(a[r], wq[u][r], xq[u]);
		}
	}
#pragma unroll
	for (int r = 0; r < NW; r++)
		a[r] = warp_sum(a[r]);
}

// ---- tensor cores: mma.sync m16n8k16, bf16 operands, fp32 accumulators ----
// Fragments (g = lane/4, c = lane%4):
//   A 16x16 row-major: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..], a3 = A[g+8][2c+8..]
//   B 16x8 (k x n):    b0 = B[2c..2c+1][g],  b1 = B[2c+8..2c+9][g]
//   C 16x8:            c0,c1 = C[g][2c..2c+1], c2,c3 = C[g+8][2c..2c+1]
__device__ __forceinline__ void mma_bf16(float c[4], const unsigned a[4], const unsigned b[2]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
	             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// A fragment from a row-major bf16 tile in shared memory (ld in elements, even).
__device__ __forceinline__ void lda_frag(unsigned a[4], const bf16_t *A, int ld, int lane) {
	const int g = lane >> 2, c = lane & 3;
	a[0] = *(const unsigned *)(A + g * ld + 2 * c);
	a[1] = *(const unsigned *)(A + (g + 8) * ld + 2 * c);
	a[2] = *(const unsigned *)(A + g * ld + 2 * c + 8);
	a[3] = *(const unsigned *)(A + (g + 8) * ld + 2 * c + 8);
}
// B fragment from B^T stored row-major ([n][k], k contiguous).
__device__ __forceinline__ void ldb_frag(unsigned b[2], const bf16_t *Bt, int ld, int lane) {
	const int g = lane >> 2, c = lane & 3;
	b[0] = *(const unsigned *)(Bt + g * ld + 2 * c);
	b[1] = *(const unsigned *)(Bt + g * ld + 2 * c + 8);
}
__device__ __forceinline__ unsigned smem_addr(const void *p) {
	return (unsigned)__cvta_generic_to_shared(p);
}
// B fragments for two adjacent n-tiles (n0, n0+8) of a k16 step, where B
// (k x n) is stored row-major [k][n] (n contiguous): ldmatrix with .trans.
// b[0..1] belong to n-tile n0, b[2..3] to n0+8. Rows must be 16-byte aligned.
__device__ __forceinline__ void ldb_frag_trans_x2(unsigned b[4], const bf16_t *B, int ld, int lane) {
	const int q = lane >> 3, r = lane & 7;
	const bf16_t *p = B + (r + 8 * (q & 1)) * ld + 8 * (q >> 1);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
	             : "r"(smem_addr(p)));
}

// ---- cp.async (16 bytes, global -> shared, bypassing L1) ----
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- counter-based RNG (splitmix64) for device-generated test data ----
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
// Uniform in [-1, 1).
__host__ __device__ __forceinline__ float urand(uint64_t seed, uint64_t i) {
	return (float)(mix64(seed * 0x100000001b3ull + i) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// ---- small launch helpers shared between files ----
static inline unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }
int qr_fill_uniform(void *dst, int is_bf16, size_t n, uint64_t seed, float lo, float hi, cudaStream_t st);
int qr_convert_f32_bf16(bf16_t *dst, const float *src, size_t n, cudaStream_t st);
int qr_convert_bf16_f32(float *dst, const bf16_t *src, size_t n, cudaStream_t st);
int qr_fill_nan(void *dst, size_t bytes, cudaStream_t st); // poison (0xFF bytes = NaN in f32 and bf16)
