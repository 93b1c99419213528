//go:build cuda

package main

// Built with -tags cuda, the CLI links the CUDA backend, which registers
// "cuda" with model.RegisterBackend, so --backend cuda works wherever a
// backend is chosen (the library is loaded when the backend is first made).
import _ "github.com/qwenref/qwenref/cuda"
