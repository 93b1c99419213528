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
