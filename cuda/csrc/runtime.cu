// runtime.cu: library state, error reporting, memory entry points, element
// conversion kernels and the cuBLAS-backed host matmul.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "internal.cuh"

QrState g_qr = {0, 0, nullptr, nullptr, 0};

static thread_local char t_err[1024];

void qr_set_error(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t_err, sizeof t_err, fmt, ap);
	va_end(ap);
}

int qr_cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
	qr_set_error("%s: %s (%s) at %s:%d", what, cudaGetErrorString(e), cudaGetErrorName(e), file, line);
	return QR_ECUDA;
}

int qr_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line) {
	qr_set_error("%s: cuBLAS status %d at %s:%d", what, (int)s, file, line);
	return QR_ECUBLAS;
}

int qr_require() {
	if (!g_qr.ready) {
		qr_set_error("qwenref_cuda: not initialised (call qr_init)");
		return QR_ESTATE;
	}
	return QR_OK;
}

extern "C" int qr_abi_version(void) { return QR_ABI_VERSION; }

extern "C" const char *qr_last_error(void) { return t_err; }

extern "C" int qr_device_count(int *n) {
	QR_ARG(n != nullptr, "qr_device_count: nil out pointer");
	*n = 0;
	const cudaError_t e = cudaGetDeviceCount(n);
	if (e == cudaErrorNoDevice) {
		*n = 0;
		return QR_OK;
	}
	if (e != cudaSuccess)
		return qr_cuda_fail(e, "cudaGetDeviceCount (is the NVIDIA driver new enough for CUDA 13?)", __FILE__,
		                    __LINE__);
	return QR_OK;
}

// An empty kernel whose attributes say which code the driver loaded.
__global__ void k_arch_probe() {}

extern "C" int qr_init(int device) {
	if (g_qr.ready)
		return QR_OK;
	t_err[0] = 0;
	QR_CK(cudaSetDevice(device));
	cudaDeviceProp p;
	QR_CK(cudaGetDeviceProperties(&p, device));
	if (p.major < 8) {
		qr_set_error("qwenref_cuda: device %s has compute capability %d.%d; need 8.0+ (built for 9.0)", p.name,
		             p.major, p.minor);
		return QR_ESTATE;
	}
	// A blocking stream: ordered with any legacy-stream work as well.
	QR_CK(cudaStreamCreate(&g_qr.stream));
	QR_CKB(cublasCreate(&g_qr.blas));
	QR_CKB(cublasSetStream(g_qr.blas, g_qr.stream));
	g_qr.device = device;
	g_qr.sm_count = p.multiProcessorCount;
	// Programmatic dependent launch needs kernels built for sm_90+: their
	// pdl_wait() compiles to nothing from older PTX (the compute_80 PTX the
	// driver JIT-compiles for a GPU the library has no machine code for, or
	// under CUDA_FORCE_PTX_JIT=1), and launching those early would race.
	cudaFuncAttributes fa;
	QR_CK(cudaFuncGetAttributes(&fa, k_arch_probe));
	g_qr.ptx_version = fa.ptxVersion;
	const char *pdl = getenv("QWENREF_CUDA_PDL");
	g_qr.pdl = p.major >= 9 && fa.ptxVersion >= 90 && !(pdl && strcmp(pdl, "0") == 0);
	g_qr.ready = 1;
	QR_TRY(qr_kernels_init());
	return QR_OK;
}

extern "C" int qr_shutdown(void) {
	if (!g_qr.ready)
		return QR_OK;
	g_qr.ready = 0;
	qr_bench_release();
	if (g_qr.blas)
		QR_CKB(cublasDestroy(g_qr.blas));
	g_qr.blas = nullptr;
	if (g_qr.stream)
		QR_CK(cudaStreamDestroy(g_qr.stream));
	g_qr.stream = nullptr;
	QR_CK(cudaDeviceSynchronize());
	return QR_OK;
}

extern "C" int qr_device_info(char *name, int name_len, int *sm_count, int *cc_major, int *cc_minor,
                              size_t *total_mem) {
	QR_TRY(qr_require());
	cudaDeviceProp p;
	QR_CK(cudaGetDeviceProperties(&p, g_qr.device));
	if (name && name_len > 0) {
		strncpy(name, p.name, (size_t)name_len - 1);
		name[name_len - 1] = 0;
	}
	if (sm_count)
		*sm_count = p.multiProcessorCount;
	if (cc_major)
		*cc_major = p.major;
	if (cc_minor)
		*cc_minor = p.minor;
	if (total_mem)
		*total_mem = p.totalGlobalMem;
	return QR_OK;
}

// ---- memory ----

extern "C" int qr_alloc(void **dptr, size_t bytes) {
	QR_TRY(qr_require());
	QR_ARG(dptr != nullptr, "qr_alloc: nil out pointer");
	QR_CK(cudaMalloc(dptr, bytes ? bytes : 16));
	return QR_OK;
}

extern "C" int qr_free(void *dptr) {
	if (dptr)
		QR_CK(cudaFree(dptr));
	return QR_OK;
}

extern "C" int qr_memcpy_h2d(void *dst, const void *src, size_t bytes) {
	QR_TRY(qr_require());
	QR_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return QR_OK;
}

extern "C" int qr_memcpy_d2h(void *dst, const void *src, size_t bytes) {
	QR_TRY(qr_require());
	QR_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return QR_OK;
}

extern "C" int qr_upload_bf16(void **dptr, const uint16_t *src, size_t n) {
	QR_TRY(qr_require());
	void *p = nullptr;
	QR_CK(cudaMalloc(&p, n ? n * 2 : 16));
	cudaError_t e = cudaMemcpyAsync(p, src, n * 2, cudaMemcpyHostToDevice, g_qr.stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(g_qr.stream);
	if (e != cudaSuccess) {
		cudaFree(p);
		return qr_cuda_fail(e, "cudaMemcpy", __FILE__, __LINE__);
	}
	*dptr = p;
	return QR_OK;
}

extern "C" int qr_upload_f32_as_bf16(void **dptr, const float *src, size_t n) {
	QR_TRY(qr_require());
	DevBuf tmp;
	QR_TRY(upload(tmp, src, n));
	void *p = nullptr;
	QR_CK(cudaMalloc(&p, n ? n * 2 : 16));
	int r = qr_convert_f32_bf16((bf16_t *)p, tmp.as<float>(), n, g_qr.stream);
	if (r == QR_OK) {
		cudaError_t e = cudaStreamSynchronize(g_qr.stream);
		if (e != cudaSuccess)
			r = qr_cuda_fail(e, "cudaStreamSynchronize", __FILE__, __LINE__);
	}
	if (r != QR_OK) {
		cudaFree(p);
		return r;
	}
	*dptr = p;
	return QR_OK;
}

extern "C" int qr_upload_f32(void **dptr, const float *src, size_t n) {
	QR_TRY(qr_require());
	void *p = nullptr;
	QR_CK(cudaMalloc(&p, n ? n * 4 : 16));
	cudaError_t e = cudaMemcpyAsync(p, src, n * 4, cudaMemcpyHostToDevice, g_qr.stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(g_qr.stream);
	if (e != cudaSuccess) {
		cudaFree(p);
		return qr_cuda_fail(e, "cudaMemcpy", __FILE__, __LINE__);
	}
	*dptr = p;
	return QR_OK;
}

static int widen_bf16_upload(float *dst, const uint16_t *src, size_t n);

extern "C" int qr_upload_bf16_as_f32(void **dptr, const uint16_t *src, size_t n) {
	QR_TRY(qr_require());
	void *p = nullptr;
	QR_CK(cudaMalloc(&p, n ? n * 4 : 16));
	const int r = widen_bf16_upload((float *)p, src, n);
	if (r != QR_OK) {
		cudaFree(p);
		return r;
	}
	*dptr = p;
	return QR_OK;
}

// ---- element kernels ----

__global__ void k_f32_to_bf16(bf16_t *dst, const float *src, size_t n) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = f2bf(src[i]);
}
__global__ void k_bf16_to_f32(float *dst, const bf16_t *src, size_t n) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = bf2f(src[i]);
}
__global__ void k_fill_uniform(void *dst, int is_bf16, size_t n, uint64_t seed, float lo, float hi) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float u = 0.5f * (urand(seed, i) + 1.0f); // [0,1)
		float v = lo + (hi - lo) * u;
		if (is_bf16)
			((bf16_t *)dst)[i] = f2bf(v);
		else
			((float *)dst)[i] = v;
	}
}

static unsigned grid_for(size_t n) {
	size_t b = (n + 255) / 256;
	size_t cap = (size_t)(g_qr.sm_count > 0 ? g_qr.sm_count : 132) * 16;
	if (b > cap)
		b = cap;
	return (unsigned)(b ? b : 1);
}

int qr_convert_f32_bf16(bf16_t *dst, const float *src, size_t n, cudaStream_t st) {
	if (!n)
		return QR_OK;
	k_f32_to_bf16<<<grid_for(n), 256, 0, st>>>(dst, src, n);
	QR_CKL("f32_to_bf16");
	return QR_OK;
}

int qr_convert_bf16_f32(float *dst, const bf16_t *src, size_t n, cudaStream_t st) {
	if (!n)
		return QR_OK;
	k_bf16_to_f32<<<grid_for(n), 256, 0, st>>>(dst, src, n);
	QR_CKL("bf16_to_f32");
	return QR_OK;
}

// Widen n host bf16 values into the fp32 device buffer dst (exact), through
// a bf16 staging buffer on the device.
static int widen_bf16_upload(float *dst, const uint16_t *src, size_t n) {
	if (!n)
		return QR_OK;
	DevBuf tmp;
	QR_TRY(tmp.alloc(n * 2));
	QR_CK(cudaMemcpyAsync(tmp.p, src, n * 2, cudaMemcpyHostToDevice, g_qr.stream));
	QR_TRY(qr_convert_bf16_f32(dst, tmp.as<bf16_t>(), n, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream)); // before tmp is freed
	return QR_OK;
}

int qr_fill_uniform(void *dst, int is_bf16, size_t n, uint64_t seed, float lo, float hi, cudaStream_t st) {
	if (!n)
		return QR_OK;
	k_fill_uniform<<<grid_for(n), 256, 0, st>>>(dst, is_bf16, n, seed, lo, hi);
	QR_CKL("fill_uniform");
	return QR_OK;
}

int qr_fill_nan(void *dst, size_t bytes, cudaStream_t st) {
	QR_CK(cudaMemsetAsync(dst, 0xff, bytes, st));
	return QR_OK;
}

// ---- cuBLAS: row-major y[m,n] = x[m,k] . W^T, W [n,k] ----
// In cuBLAS's column-major view y^T[n,m] = W[n,k] . x^T[k,m], i.e. op(A)=T on
// the [k,n] column-major view of W: the "TN" layout the tensor-core kernels prefer.
int qr_gemm_bf16(void *y, int y_is_f32, int ldy, const bf16_t *x, int ldx, const bf16_t *w, int ldw, int m, int n,
                 int k, cudaStream_t st) {
	const float one = 1.0f, zero = 0.0f;
	QR_CKB(cublasSetStream(g_qr.blas, st));
	QR_CKB(cublasGemmEx(g_qr.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, ldw, x, CUDA_R_16BF, ldx,
	                    &zero, y, y_is_f32 ? CUDA_R_32F : CUDA_R_16BF, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	return QR_OK;
}

extern "C" int qr_matmul_bf16(float *y, const float *x, int m, int k, int n, const void *w_dev) {
	QR_TRY(qr_require());
	QR_ARG(m >= 0 && k > 0 && n > 0 && w_dev, "qr_matmul_bf16: bad args m=%d k=%d n=%d", m, k, n);
	if (m == 0)
		return QR_OK;
	DevBuf xf, xb, yd;
	QR_TRY(upload(xf, x, (size_t)m * k));
	QR_TRY(xb.alloc((size_t)m * k * 2));
	QR_TRY(yd.alloc((size_t)m * n * 4));
	QR_TRY(qr_fill_nan(yd.p, (size_t)m * n * 4, g_qr.stream));
	QR_TRY(qr_convert_f32_bf16(xb.as<bf16_t>(), xf.as<float>(), (size_t)m * k, g_qr.stream));
	QR_TRY(qr_gemm_bf16(yd.p, 1, n, xb.as<bf16_t>(), k, (const bf16_t *)w_dev, k, m, n, k, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(y, yd, (size_t)m * n);
}

// fp32 y[m,n] = x[m,k] . W^T with W fp32 on the device: the pedantic fp32
// compute type, so cuBLAS uses no TF32 or other reduced-precision path.
extern "C" int qr_matmul_f32(float *y, const float *x, int m, int k, int n, const void *w_dev) {
	QR_TRY(qr_require());
	QR_ARG(m >= 0 && k > 0 && n > 0 && w_dev, "qr_matmul_f32: bad args m=%d k=%d n=%d", m, k, n);
	if (m == 0)
		return QR_OK;
	DevBuf xf, yd;
	QR_TRY(upload(xf, x, (size_t)m * k));
	QR_TRY(yd.alloc((size_t)m * n * 4));
	QR_TRY(qr_fill_nan(yd.p, (size_t)m * n * 4, g_qr.stream));
	const float one = 1.0f, zero = 0.0f;
	QR_CKB(cublasSetStream(g_qr.blas, g_qr.stream));
	QR_CKB(cublasGemmEx(g_qr.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w_dev, CUDA_R_32F, k, xf.p, CUDA_R_32F, k,
	                    &zero, yd.p, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return download(y, yd, (size_t)m * n);
}
