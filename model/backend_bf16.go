package model

import "github.com/qwenref/qwenref/linalg"

// newBF16MatMul is the matmul=bf16 variant: the best bf16-compute kernel
// this process runs (linalg.NewBF16Compute: AMX tiles, else AVX512_BF16's
// VDPBF16PS, else the widening float32 product; QWENREF_BF16 forces one,
// and one this process cannot run is refused).
func newBF16MatMul() (any, error) { return linalg.NewBF16Compute() }
