// Package cuda is qwenref's CUDA backend for NVIDIA GPUs (built and tuned for
// the H200, sm_90).
//
// The kernels live in C++/CUDA under csrc/ and are compiled by nvcc into
// libqwenref_cuda.so. The Go side is behind the build tag `cuda`: it loads
// that library at run time with dlopen (from $QWENREF_CUDA_LIB, else next to
// the executable, else ./libqwenref_cuda.so) and calls it through small C
// trampolines, so the tagged package compiles on machines without any CUDA
// toolkit. Without the tag, Open always fails with ErrNotBuilt.
//
// With the tag the package offers:
//
//   - Open and (*Device).Close: the library, one GPU, and the weights cached
//     on it (freed deterministically by Close);
//   - Conv, GatedDelta, Attention and MatMul, which implement conv1d.Kernel,
//     gateddelta.Kernel, attention.Kernel and linalg.MatMuler on host slices,
//     so the GPU can be checked against the CPU backends value for value;
//   - (*Device).GDNLayer, a whole Gated DeltaNet layer on the device (bf16
//     weights and activations, fp32 state);
//   - the device-resident benchmarks (BenchConv, BenchGDNCore,
//     BenchGDNLayer, BenchDecodeStep, ...), timed with CUDA events at the 27B
//     dimensions on data generated on the GPU;
//   - Model, the whole text model resident on the device (weights generated
//     there from a seed, or uploaded from a model.Model): prefill, cached
//     decode, greedy decoding as CUDA-graph replays, and its benchmarks;
//   - the "cuda" backend of the model package's registry (NewBackend),
//     registered by this package's init.
//
// See cuda/README.md for building the library and docs/perf-cuda.md for the
// measured numbers.
package cuda
