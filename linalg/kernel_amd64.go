package linalg

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_amd64.go

func init() {
	// BW for the 16-bit loads that widen bf16; every AVX-512 core since
	// Skylake-X has both.
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW {
		registerGemm(avx512Gemm)
		tposeF32, tposeBF16 = transpose16F32, transpose16BF16
		if cpu.X86.HasAVX512BF16 {
			bf16DotKernels = append([]*gemmKernel{avx512BF16Dot}, bf16DotKernels...)
		}
	}
}

// avx512Gemm is the 14×32 assembly kernel (kernel_amd64.s). Assembly rather
// than archsimd because it needs 28 accumulators plus two B registers, and
// archsimd's register allocator only hands out 15 vector registers on amd64.
var avx512Gemm = &gemmKernel{name: "avx512asm14x32", mr: 14, nr: 32, prio: 20, tile: avx512Tile}

func avx512Tile(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	// The slices are checked here once so the assembly can trust them: the
	// kernel reads kc·rows of a and kc·32 of b, and touches only masked
	// columns of C, the last row ending at (rows-1)·ldc+cols.
	_ = a[kc*rows-1]
	_ = b[kc*32-1]
	_ = c[(rows-1)*ldc+cols-1]
	mask := uint64(1)<<uint(cols) - 1
	accFlag := 0
	if acc {
		accFlag = 1
	}
	sgemmAVX512[rows](kc, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, mask, accFlag)
}

// avx512BF16Dot is the 14×32 VDPBF16PS kernel over bf16 pairs.
var avx512BF16Dot = &gemmKernel{
	name: "avx512bf16asm14x32", mr: 14, nr: 32, prio: 20, tile: avx512BF16DotTile,
	kstep: 2, packA: packAPairs, packB: packBPairs,
}

func avx512BF16DotTile(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	_ = a[kc*rows-1]
	_ = b[kc*32-1]
	_ = c[(rows-1)*ldc+cols-1]
	mask := uint64(1)<<uint(cols) - 1
	accFlag := 0
	if acc {
		accFlag = 1
	}
	sbdotAVX512[rows](kc, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, mask, accFlag)
}
