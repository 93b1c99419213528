// wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the
// kernels that use it (flash_attn_wg.cu, gdn_scan_wg.cu): shared-memory
// descriptors of the 128-byte swizzle, the fences and waits, and the product
// shapes they issue. A warpgroup is four consecutive warps; every thread of
// it executes each wgmma together. The wrappers' operand lists are written
// out by cuda/gen/wgmma.py.
//
// Tiles in shared memory are stored the way the descriptors name them: a
// [rows, 64·m] bf16 tile is m column blocks of 64 elements, each row of a
// block 128 bytes, its 16-byte chunk j at j ^ (row % 8), every block aligned
// to 1024 bytes. The same bytes serve as a K-major operand (rows are M or N,
// 16 k a step: +32 bytes) and as an MN-major one (rows are K, 16 rows a
// step: +2048 bytes; the next 64 columns a block further on).
#pragma once

#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QR_WGMMA 1
#endif

// Byte offset of 16-byte chunk ch (8 bf16; ch / 8 is the column block) of
// row r in a swizzled tile of `rows` rows.
__device__ __forceinline__ unsigned wg_off(int r, int ch, int rows) {
	return (unsigned)((ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

// Whether this device runs the wgmma kernels of this build: an sm_90 GPU and
// sm_90a machine code (a probe kernel's answer, once). flash_attn_wg.cu.
int qr_wgmma_ready(bool *ok);

#ifdef QR_WGMMA
// Descriptor of a swizzled tile at shared address saddr: leading and stride
// byte offsets (stored in 16-byte units), 128-byte swizzle.
__device__ __forceinline__ uint64_t wg_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
	return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
	       (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// cp.async and plain stores write through the generic proxy; wgmma reads
// through the async proxy, which must see them.
__device__ __forceinline__ void wg_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps registers a wgmma reads live until here, so that nothing else is
// written to them while it runs (ptxas would serialize the chains).
template <int N> __device__ __forceinline__ void wg_keep_regs(unsigned *r) {
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+r"(r[i])::"memory");
}
// Keeps the compiler from moving uses of wgmma results above the wait.
template <int N> __device__ __forceinline__ void wg_fence_regs(float *r) {
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(r[i])::"memory");
}
// The bf16 A fragment of k16 step kk from an fp32 accumulator of the same
// rows (acc[4j + e]: row g + 8(e >> 1), column 8j + 2c + (e & 1) of each
// warp's 16): the accumulator's layout is the A operand's.
__device__ __forceinline__ void wg_acc_to_a(unsigned a[4], const float *acc, int kk) {
	const float *lo = acc + 8 * kk, *hi = lo + 4;
	a[0] = pack_bf2(lo[0], lo[1]);
	a[1] = pack_bf2(lo[2], lo[3]);
	a[2] = pack_bf2(hi[0], hi[1]);
	a[3] = pack_bf2(hi[2], hi[3]);
}

#define WG_F8(d, i)                                                                                                    \
	"+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]),        \
	    "+f"(d[i + 7])

// d[64x64] = A[64x16] B[16x64] + (accumulate ? d : 0); A and B K-major in
// shared memory.
__device__ __forceinline__ void wg_m64n64k16_ss(float d[32], uint64_t da, uint64_t db, int accumulate) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
	             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
	             "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
	             : WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24)
	             : "l"(da), "l"(db), "r"(accumulate));
}

// d[64x64] = A[64x16] B[16x64] + (accumulate ? d : 0); A in registers (the
// mma.sync A fragment of each warp's 16 rows), B K-major in shared memory.
__device__ __forceinline__ void wg_m64n64k16_rs(float d[32], const unsigned a[4], uint64_t db, int accumulate) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
	             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
	             "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
	             : WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24)
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// d[64x128] = A[64x16] B[16x128] + (accumulate ? d : 0); A in registers, B
// MN-major (n contiguous) in shared memory.
__device__ __forceinline__ void wg_m64n128k16_rs_t(float d[64], const unsigned a[4], uint64_t db, int accumulate) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
	             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	             "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
	             "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
	             : WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24), WG_F8(d, 32), WG_F8(d, 40), WG_F8(d, 48),
	               WG_F8(d, 56)
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// d[64x256] = A[64x16] B[16x256] + (accumulate ? d : 0); A in registers, B
// MN-major (n contiguous) in shared memory.
__device__ __forceinline__ void wg_m64n256k16_rs_t(float d[128], const unsigned a[4], uint64_t db, int accumulate) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
	             "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
	             "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
	             "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
	             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
	             "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
	             "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
	             "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
	             "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
	             "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
	             : WG_F8(d, 0), WG_F8(d, 8), WG_F8(d, 16), WG_F8(d, 24), WG_F8(d, 32), WG_F8(d, 40), WG_F8(d, 48),
	               WG_F8(d, 56), WG_F8(d, 64), WG_F8(d, 72), WG_F8(d, 80), WG_F8(d, 88), WG_F8(d, 96), WG_F8(d, 104),
	               WG_F8(d, 112), WG_F8(d, 120)
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
#endif // QR_WGMMA
