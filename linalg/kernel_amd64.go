package linalg

import (
	"unsafe"

	"github.com/qwenref/qwenref/internal/cpu"
)

// init registers the kernels of the selected level and of every level
// below it (the tests sweep them all); the highest registered one runs.
// At avx2 no AVX-512 instruction runs at all, packing included, so
// QWENREF_CPU=avx2 behaves like a CPU without AVX-512.
func init() {
	level := cpu.Selected()
	if level == cpu.AVX2 || level == cpu.AVX512 {
		registerGemm(avx2Gemm)
		registerGemv(avx2Gemv)
		tpose8F32, tpose8BF16, packName = transpose8F32, transpose8BF16, "avx2"
	}
	if level == cpu.AVX512 {
		registerGemm(avx512Gemm)
		registerGemv(avx512Gemv)
		tposeF32, tposeBF16, packName = transpose16F32, transpose16BF16, "avx512"
	}
	if cpu.HasBF16() {
		bf16DotKernels = append([]*gemmKernel{avx512BF16Dot}, bf16DotKernels...)
	}
}

// avx2Gemm is the 6×16 AVX2+FMA assembly kernel (kernel_avx2_amd64.s):
// 12 ymm accumulators, the most that 16 ymm registers leave room for.
var avx2Gemm = &gemmKernel{name: "avx2asm6x16", level: cpu.AVX2, mr: 6, nr: 16, prio: 10, tile: avx2Tile}

func avx2Tile(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	_ = a[kc*rows-1]
	_ = b[kc*16-1]
	accFlag := 0
	if acc {
		accFlag = 1
	}
	if cols == 16 {
		_ = c[(rows-1)*ldc+15]
		sgemmAVX2[rows](kc, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, accFlag)
		return
	}
	// Ragged right edge: compute the full tile into scratch, copy cols.
	var t [6 * 16]float32
	sgemmAVX2[rows](kc, unsafe.SliceData(a), unsafe.SliceData(b), &t[0], 16, 0)
	for i := 0; i < rows; i++ {
		ci, ti := c[i*ldc:i*ldc+cols], t[i*16:i*16+cols]
		if acc {
			for j, v := range ti {
				ci[j] += v
			}
		} else {
			copy(ci, ti)
		}
	}
}

// avx2Gemv is the 8-row, 8-lane assembly streaming kernel. Up to M = 8
// (the blocking's cap) it beats packing for the 6×16 kernel
// (see docs/perf-linalg.md).
var avx2Gemv = &gemvKernel{name: "avx2asm8", level: cpu.AVX2, prio: 10, maxM: 8, f32: avx2GemvF32, bf16: avx2GemvBF16}

func avx2GemvF32(y []float32, ldy int, x []float32, m, k int, w []float32) {
	streamRows8F32(&sgemvF32AVX2, y, ldy, x, m, k, w)
}

func avx2GemvBF16(y []float32, ldy int, x []float32, m, k int, w []uint16) {
	streamRows8BF16(&sgemvBF16AVX2, y, ldy, x, m, k, w)
}

// avx512Gemm is the 14×32 assembly kernel (kernel_amd64.s). Assembly rather
// than archsimd because it needs 28 accumulators plus two B registers, and
// archsimd's register allocator only hands out 15 vector registers on amd64.
var avx512Gemm = &gemmKernel{name: "avx512asm14x32", level: cpu.AVX512, mr: 14, nr: 32, prio: 20, tile: avx512Tile}

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
	name: "avx512bf16asm14x32", level: cpu.AVX512, mr: 14, nr: 32, prio: 20, tile: avx512BF16DotTile,
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

// avx512Gemv is the assembly streaming kernel: eight weight rows per pass,
// each its own DRAM stream, 16 lanes wide. Up to M = 6 it beats packing
// (each x row re-reads the eight rows from L1/L2, not from DRAM). Assembly here too because the
// archsimd version spills its row pointers and accumulators (it needs 8
// pointers and 9 vectors live) and reached only 70% of the bandwidth on bf16.
var avx512Gemv = &gemvKernel{name: "avx512asm8", level: cpu.AVX512, prio: 20, maxM: 6, f32: asmGemvF32, bf16: asmGemvBF16}

func asmGemvF32(y []float32, ldy int, x []float32, m, k int, w []float32) {
	mask := uint64(1)<<uint(k%16) - 1
	rows := len(w) / k
	for r := 0; r < rows; r += 8 {
		nr := min(8, rows-r)
		wr := w[r*k : (r+nr)*k] // the kernel reads nr rows of k
		for i := 0; i < m; i++ {
			xi, yi := x[i*k:(i+1)*k], y[i*ldy+r:i*ldy+r+nr]
			sgemvF32[nr](k, &xi[0], &wr[0], k, &yi[0], mask)
		}
	}
}

func asmGemvBF16(y []float32, ldy int, x []float32, m, k int, w []uint16) {
	mask := uint64(1)<<uint(k%16) - 1
	rows := len(w) / k
	for r := 0; r < rows; r += 8 {
		nr := min(8, rows-r)
		wr := w[r*k : (r+nr)*k]
		for i := 0; i < m; i++ {
			xi, yi := x[i*k:(i+1)*k], y[i*ldy+r:i*ldy+r+nr]
			sgemvBF16[nr](k, &xi[0], &wr[0], k, &yi[0], mask)
		}
	}
}
