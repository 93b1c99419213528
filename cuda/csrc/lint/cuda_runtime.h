// Lint-only stand-in for the CUDA runtime header: just enough declarations
// for `clang++ -x cuda -nocudainc` to parse and type-check qwenref's .cu
// files on a machine without a CUDA toolkit (scripts/gpu-check lint). The
// real build (nvcc) never sees this directory. Written for qwenref; values
// of the enumerators are placeholders, not CUDA's.
#pragma once
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define CUDA_VERSION 12000
#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))

struct __align__(16) uint4 { unsigned x, y, z, w; };
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) ulonglong2 { unsigned long long x, y; };
struct __align__(16) longlong2 { long long x, y; };
struct __align__(16) double2 { double x, y; };
struct char2 { signed char x, y; }; struct char4 { signed char x, y, z, w; };
struct uchar2 { unsigned char x, y; }; struct uchar4 { unsigned char x, y, z, w; };
struct short2 { short x, y; }; struct short4 { short x, y, z, w; };
struct ushort2 { unsigned short x, y; }; struct ushort4 { unsigned short x, y, z, w; };
static __host__ __device__ inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { uint4 r = {x, y, z, w}; return r; }
static __host__ __device__ inline float2 make_float2(float x, float y) { float2 r = {x, y}; return r; }
static __host__ __device__ inline uint2 make_uint2(unsigned x, unsigned y) { uint2 r = {x, y}; return r; }
static __host__ __device__ inline float4 make_float4(float x, float y, float z, float w) { float4 r = {x, y, z, w}; return r; }
struct dim3 {
	unsigned x, y, z;
	__host__ __device__ dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 { unsigned x, y, z; };
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

#include <__clang_cuda_builtin_vars.h>
#include <__clang_cuda_libdevice_declares.h>
#include <__clang_cuda_device_functions.h>
#include <__clang_cuda_math.h>
#include <__clang_cuda_intrinsics.h>

static __device__ inline size_t __cvta_generic_to_shared(const void *p) {
	unsigned long long r;
	asm("cvta.to.shared.u64 %0, %1;" : "=l"(r) : "l"(p));
	return r;
}
static __device__ inline bool isfinite(float x) { return __finitef(x); }
static __device__ inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
	return __nvvm_atom_add_gen_ll((long long *)p, (long long)v);
}

typedef enum cudaError { cudaSuccess = 0, cudaErrorNoDevice = 100, cudaErrorUnknown = 999 } cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed };
#define cudaStreamNonBlocking 0x01
struct cudaDeviceProp { char name[256]; size_t totalGlobalMem; int major, minor, multiProcessorCount; };

extern "C" {
__host__ const char *cudaGetErrorString(cudaError_t);
__host__ const char *cudaGetErrorName(cudaError_t);
__host__ cudaError_t cudaGetLastError(void);
__host__ cudaError_t cudaSetDevice(int);
__host__ cudaError_t cudaGetDeviceCount(int *);
__host__ cudaError_t cudaGetDeviceProperties(cudaDeviceProp *, int);
__host__ cudaError_t cudaDeviceGetAttribute(int *, cudaDeviceAttr, int);
__host__ cudaError_t cudaDeviceSynchronize(void);
__host__ cudaError_t cudaMalloc(void **, size_t);
__host__ cudaError_t cudaFree(void *);
__host__ cudaError_t cudaMallocHost(void **, size_t);
__host__ cudaError_t cudaFreeHost(void *);
__host__ cudaError_t cudaMemcpy(void *, const void *, size_t, cudaMemcpyKind);
__host__ cudaError_t cudaMemcpyAsync(void *, const void *, size_t, cudaMemcpyKind, cudaStream_t);
__host__ cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t);
__host__ cudaError_t cudaMemset(void *, int, size_t);
__host__ cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
__host__ cudaError_t cudaStreamCreate(cudaStream_t *);
__host__ cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
__host__ cudaError_t cudaStreamDestroy(cudaStream_t);
__host__ cudaError_t cudaStreamSynchronize(cudaStream_t);
__host__ cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode);
__host__ cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
__host__ cudaError_t cudaGraphInstantiate(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
__host__ cudaError_t cudaGraphDestroy(cudaGraph_t);
__host__ cudaError_t cudaGraphExecDestroy(cudaGraphExec_t);
__host__ cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
__host__ cudaError_t cudaEventCreate(cudaEvent_t *);
__host__ cudaError_t cudaEventDestroy(cudaEvent_t);
__host__ cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
__host__ cudaError_t cudaEventElapsedTime(float *, cudaEvent_t, cudaEvent_t);
__host__ cudaError_t cudaEventSynchronize(cudaEvent_t);
__host__ cudaError_t cudaMemGetInfo(size_t *, size_t *);
__host__ cudaError_t cudaFuncSetAttributeRaw(const void *, cudaFuncAttribute, int);
__host__ __device__ unsigned __cudaPushCallConfiguration(dim3, dim3, size_t = 0, cudaStream_t = 0);
__host__ cudaError_t cudaConfigureCall(dim3, dim3, size_t = 0, cudaStream_t = 0);
__host__ cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
}
template <class T> static __host__ inline cudaError_t cudaFuncSetAttribute(T *f, cudaFuncAttribute a, int v) {
	return cudaFuncSetAttributeRaw((const void *)f, a, v);
}
struct cudaFuncAttributes {
	size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
	int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion;
};
__host__ cudaError_t cudaFuncGetAttributesRaw(cudaFuncAttributes *, const void *);
template <class T> static __host__ inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, T *f) {
	return cudaFuncGetAttributesRaw(a, (const void *)f);
}

// Launch configuration with attributes (programmatic dependent launch).
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
	int programmaticStreamSerializationAllowed;
	char pad[64];
};
struct cudaLaunchAttribute {
	cudaLaunchAttributeID id;
	cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
	dim3 gridDim, blockDim;
	size_t dynamicSmemBytes;
	cudaStream_t stream;
	cudaLaunchAttribute *attrs;
	unsigned int numAttrs;
};
template <typename... E, typename... A>
static __host__ inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *, void (*)(E...), A &&...) {
	return cudaSuccess;
}
