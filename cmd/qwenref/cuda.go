package main

// The CLI links the CUDA backend, which registers "cuda", "cuda-fp32" and
// "cuda-ops" with model.RegisterBackend, so --backend cuda works wherever a
// backend is chosen. The package binds its prebuilt kernels with dlopen
// (no cgo), so every build carries it; the library, the driver and cuBLAS
// are looked for when the backend is first made.

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/qwenref/qwenref/cuda"
)

// addGPUFlag gives a command --gpu N: which GPU the CUDA backends open.
func addGPUFlag(fs *flag.FlagSet) {
	fs.Var(&gpuFlag{}, "gpu", "GPU the cuda backends run on, numbered from 0 as nvidia-smi does (default: $"+cuda.GPUEnv+", else 0)")
}

// gpuFlag is --gpu: unset reads as -1, and its zero value prints as the
// default, so the help shows only the default its text gives.
type gpuFlag struct {
	n   int
	set bool
}

func (g *gpuFlag) String() string {
	if g == nil || !g.set {
		return ""
	}
	return strconv.Itoa(g.n)
}

func (g *gpuFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("want a GPU number, got %q", s)
	}
	g.n, g.set = n, true
	return nil
}

// Get is the GPU asked for, -1 when none was.
func (g *gpuFlag) Get() any {
	if !g.set {
		return -1
	}
	return g.n
}

// applyGPUFlag passes --gpu to the cuda package before any backend opens.
func applyGPUFlag(fs *flag.FlagSet) error {
	f := fs.Lookup("gpu")
	if f == nil {
		return nil
	}
	n, _ := f.Value.(flag.Getter).Get().(int)
	if n == -1 {
		return nil
	}
	if n < 0 {
		return fmt.Errorf("--gpu must be 0 or more, got %d", n)
	}
	return cuda.SetGPU(n)
}
