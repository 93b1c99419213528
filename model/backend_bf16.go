package model

import (
	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/linalg"
)

// newBF16MatMul is the matmul=bf16 variant: the best bf16-compute kernel
// this process runs (linalg.NewBF16Compute: AMX tiles, else AVX512_BF16's
// VDPBF16PS, else the widening float32 product; QWENREF_BF16 forces one,
// and one this process cannot run is refused).
func newBF16MatMul() (any, error) { return linalg.NewBF16Compute() }

// KernelLevel is the CPU kernel level the CPU backends run at.
type KernelLevel struct {
	// Name describes it, e.g. "avx512 (AVX512_BF16)".
	Name string
	// Levels are the ones this CPU has, best first; EnvVar forces one.
	Levels []string
	EnvVar string
	// Err says when EnvVar names a level this CPU lacks (the CPU backends
	// then run the best one).
	Err error
	// BF16 names the bf16-compute kernel matmul=bf16 (and chunked-bf16)
	// runs, and why a faster one is not used (linalg.BF16Kernel);
	// BF16EnvVar forces one.
	BF16, BF16EnvVar string
}

// CPUKernels says which kernel level the CPU backends run at
// (internal/cpu's choice).
func CPUKernels() KernelLevel {
	k := KernelLevel{Name: cpu.Describe(), EnvVar: cpu.EnvVar, Err: cpu.Check(), BF16: linalg.BF16Kernel(), BF16EnvVar: cpu.BF16EnvVar}
	for _, l := range cpu.Supported() {
		k.Levels = append(k.Levels, l.String())
	}
	return k
}

// bf16Precision is matmul=bf16's precision on this CPU: bf16 unless the
// kernel chosen is the widening float32 product.
func bf16Precision() Precision {
	if k, _, err := cpu.BF16Choice(); err == nil && k == cpu.BF16Widen {
		return PrecisionF32
	}
	return PrecisionBF16
}
