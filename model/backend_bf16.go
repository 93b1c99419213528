package model

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/linalg"
)

// newBF16MatMul is the matmul=bf16 variant. It is refused, not emulated,
// on CPUs (or forced levels) without VDPBF16PS: a slow stand-in would make
// every timing of it meaningless.
func newBF16MatMul() (any, error) {
	if !cpu.HasBF16() {
		return nil, fmt.Errorf("matmul=bf16 needs AVX512_BF16 (VDPBF16PS) at kernel level avx512; this CPU runs %s", cpu.Describe())
	}
	return linalg.BlockedBF16Dot{}, nil
}

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
}

// CPUKernels says which kernel level the CPU backends run at
// (internal/cpu's choice).
func CPUKernels() KernelLevel {
	k := KernelLevel{Name: cpu.Describe(), EnvVar: cpu.EnvVar, Err: cpu.Check()}
	for _, l := range cpu.Supported() {
		k.Levels = append(k.Levels, l.String())
	}
	return k
}
