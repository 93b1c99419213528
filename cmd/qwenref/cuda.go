package main

// The CLI links the CUDA backend, which registers "cuda", "cuda-fp32" and
// "cuda-ops" with model.RegisterBackend, so --backend cuda works wherever a
// backend is chosen. The package binds its prebuilt kernels with dlopen
// (no cgo), so every build carries it; the library, the driver and cuBLAS
// are looked for when the backend is first made.
import _ "github.com/qwenref/qwenref/cuda"
