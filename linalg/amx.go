package linalg

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// BlockedAMX is the bf16-compute product on AMX-BF16 tiles (Sapphire
// Rapids and later Xeons, on Linux): like BlockedBF16Dot it rounds x to
// bf16 (nearest, ties to even, with tensor.Float32ToBF16's bits; float32
// weights too, bf16 weights are used as they are) and sums the exact
// bf16×bf16 products in float32, here with TDPBF16PS, 16×16×32
// multiply-adds per instruction.
//
// Numerics, per output: each instruction adds 32 products (16 k pairs)
// into the float32 accumulator in an order and with an intermediate
// precision that the ISA leaves to the processor (on the Xeon of
// docs/perf.md neither VDPBF16PS's order nor one rounding of the exact
// sum); the instructions follow in k order over the whole of K, the
// accumulator going to y and back exactly between K slices. bf16
// subnormal inputs read as zero. So the error is dominated by rounding x
// to 8 significant bits: 1.4e-3 relative L2 against the float32 product
// on random data, and 2.4e-7 against the exact product of the rounded
// operands (TestAMXAccuracy). Results do not depend on the blocking or
// the thread count, bit for bit, nor, on the Xeon of docs/perf.md, on M:
// M ≤ 16 (decode, short prompts) takes a kernel that reads bf16 weights
// in place and adds the same products in the same order, the operands
// swapped (TestAMXRowsIndependentOfM).
//
// It runs only where internal/cpu allows AMX (cpu.AMX: the CPU, kernel
// level avx512 and the OS's tile-data permission); elsewhere MatMulT
// returns that error. The zero value is ready to use and safe for
// concurrent calls.
type BlockedAMX struct {
	// Threads caps the goroutines one call uses; 0 means runtime.GOMAXPROCS.
	Threads int

	blk *amxBlocks // nil: defaultAMXBlocks
}

// amxBlocks holds the AMX product's block sizes. Tests shrink them so that
// small shapes cross every block edge.
type amxBlocks struct {
	// kc bounds the K slice: a slice of one x row block (32 rows, 160 KiB
	// at 2560 k) is reused from L1/L2 against every panel of a W block.
	kc int
	// nc bounds the W columns one goroutine packs at once (nc·kc bf16,
	// 640 KiB at 128 × 2560), which stay in L2 while x streams past.
	nc int
}

// defaultAMXBlocks was tuned on the 2-core Xeon of docs/perf.md (2 MiB of
// L2 per core) at 2048×5120×10240: 2560 × 128 beat 1024–5120 × 96–768 by
// 5–25%.
var defaultAMXBlocks = amxBlocks{kc: 2560, nc: 128}

// The AMX layouts (internal/kernelgen/linalg/amx), in steps of 32 k values: a row block
// of x is 32 rows × 32 bf16 per step (1024 bf16), a W panel 16 pair rows ×
// 32 columns × 2 bf16 per step (1024 bf16 too).
const (
	amxRows = 32   // rows of a block, columns of a panel
	amxK    = 32   // k values per step
	amxStep = 1024 // bf16 of A, and of B, per step
)

// amxKernelName names the AMX kernel, for KernelInfo and BF16Kernel.
const amxKernelName = "amxbf16asm32x32"

// MatMulT implements MatMuler.
func (b BlockedAMX) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := cpu.AMX(); err != nil {
		return fmt.Errorf("linalg: AMX product: %w", err)
	}
	bl := &defaultAMXBlocks
	if b.blk != nil {
		bl = b.blk
	}
	threads, done, err := prologue(y, x, m, w, b.Threads, &defaultBlocking)
	if done || err != nil {
		return err
	}
	if m <= amxSmallMaxM && w.BF16 != nil && w.Cols%amxK == 0 && b.blk == nil {
		runAMXSmallM(y, x, m, w, threads)
		return nil
	}
	runAMX(bl, y, x, m, w, threads)
	return nil
}

// NewBF16Compute returns the bf16-compute product that `matmul=bf16`
// selects, with the kernel cpu.BF16Choice picks (QWENREF_BF16, or the best
// this process runs): BlockedAMX, BlockedBF16Dot with its VDPBF16PS kernel,
// or, where neither runs, Blocked, which widens the bf16 weights to float32
// and does not round x. It fails only when QWENREF_BF16 forces a kernel
// this process cannot run.
func NewBF16Compute() (MatMuler, error) {
	k, _, err := cpu.BF16Choice()
	if err != nil {
		return nil, err
	}
	switch k {
	case cpu.BF16AMX:
		amxInUse.Store(true)
		return BlockedAMX{}, nil
	case cpu.BF16AVX512:
		return BlockedBF16Dot{}, nil
	}
	return Blocked{}, nil
}

// BF16Kernel names the kernel NewBF16Compute's product runs in this
// process, and why a better one does not run, for the commands to print:
// e.g. "amx (amxbf16asm32x32)", "avx512bf16 (avx512bf16asm14x32; amx: this
// CPU has no AMX-BF16)" or "widen (avx2asm6x16; …)". A QWENREF_BF16 that
// cannot run is named with the kernel used instead.
func BF16Kernel() string {
	k, note, err := cpu.BF16Choice()
	s := k.String() + " (" + bf16KernelName(k)
	if err != nil {
		note = err.Error()
	}
	if note != "" {
		s += "; " + note
	}
	return s + ")"
}

// bf16KernelName is the micro-kernel behind a bf16 kernel choice.
func bf16KernelName(k cpu.BF16Kernel) string {
	switch k {
	case cpu.BF16AMX:
		return amxKernelName
	case cpu.BF16AVX512:
		return bf16DotKernels[0].name
	}
	return gemmKernels[0].name
}
