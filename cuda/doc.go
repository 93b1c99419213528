// Package cuda is qwenref's CUDA backend for NVIDIA GPUs (tuned on the
// H200, sm_90; prebuilt for sm_80, sm_90a, sm_100 and sm_120 plus compute_80 PTX).
//
// The kernels live in C++/CUDA under csrc/ and are compiled by nvcc into
// libqwenref_cuda.so, which this package embeds (prebuilt/, with the
// sha256 of every source it was built from). The package binds it with
// purego (dlopen without cgo), so it builds everywhere with no tag, no C
// compiler and no CUDA toolkit; at run time it needs the NVIDIA driver
// (580+) and cuBLAS 13, which it looks for in the loader's path, the CUDA
// toolkit directories and Python environments' nvidia wheels (find.go).
//
// It offers:
//
//   - the backends "cuda" (the whole model resident on the device, through
//     model.NewRunner), "cuda-fp32" (the same resident model in fp32, the
//     GPU reference) and "cuda-ops" (the bf16 kernels op by op), registered
//     by init;
//   - Open, SetGPU and (*Device).Close: the library, one GPU, and the
//     weights cached on it;
//   - Conv, GatedDelta, Attention, MatMul and MatMulF32, which implement
//     conv1d.Kernel, gateddelta.Kernel, attention.Kernel and
//     linalg.MatMuler on host slices;
//   - (*Device).GDNLayer, a whole Gated DeltaNet layer on the device;
//   - the whole text model resident on the device (weights generated
//     there from a seed, or uploaded from a model.Model after a memory
//     estimate, EstimateMemory), prefill, graph-replayed decode, greedy
//     decoding and its benchmarks, in bf16 or fp32; it is unexported, and
//     model.Runner (the "cuda" and "cuda-fp32" backends) is the way to it;
//   - the device-resident benchmarks (BenchConv, BenchGDNCore, ...), timed
//     with CUDA events.
//
// See cuda/README.md for building the library and docs/perf-cuda.md for
// the measured numbers.
package cuda
