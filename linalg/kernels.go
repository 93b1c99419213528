package linalg

import (
	"fmt"
	"math"
	"sort"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// gemmKernel is a register-tile micro-kernel and the panel shapes it reads.
// Packed A panels hold kc steps of `rows` floats (k-major), packed B panels
// kc steps of nr floats, so one k step is a rank-1 update of the tile.
type gemmKernel struct {
	name   string
	level  cpu.Level // the level whose instructions it uses
	mr, nr int
	// prio orders the kernels this build and CPU can run; highest wins.
	prio int
	// tile writes (acc=false) or adds to (acc=true) the rows×cols block of C
	// that starts at c[0] with row stride ldc:
	// C[i][j] (+)= Σ_{k<kc} a[k·rows+i]·b[k·nr+j], rows ≤ mr, cols ≤ nr.
	tile func(kc int, a, b, c []float32, ldc, rows, cols int, acc bool)
	// kstep is the number of k values in one packed element: 1, or 2 for
	// the bf16-pair kernels, whose kc and panels count pairs.
	kstep int
	// packA and packB pack kb values of k into ⌈kb/kstep⌉ panel steps;
	// nil means the float32 packers packA and packB.
	packA func(dst, x []float32, ldx, i0, rows, k0, kb int)
	packB func(dst []float32, w *tensor.Matrix, nr, j0, cols, k0, kb int)
}

// gemvKernel is the small-M path: it streams W rows once, unpacked, and
// dots each with every x row, so M=1 (decode) reads the weights exactly once.
type gemvKernel struct {
	name  string
	level cpu.Level
	prio  int
	// maxM is the largest M for which this kernel beats packing + the best
	// GEMM kernel (measured; see docs/perf-linalg.md).
	maxM int
	// f32 sets y[i·ldy+r] = x[i,:]·w[r,:] for i < m and every row r of w
	// (len(w)/k rows); x is m×k row-major.
	f32 func(y []float32, ldy int, x []float32, m, k int, w []float32)
	// bf16 does the same for bf16 weights, widened in registers.
	bf16 func(y []float32, ldy int, x []float32, m, k int, w []uint16)
}

var (
	gemmKernels = []*gemmKernel{genericGemm}
	gemvKernels = []*gemvKernel{genericGemv}
	// packName names the packing transposes in use, for KernelInfo.
	packName = "go"
)

// KernelInfo names the kernels that Blocked runs in this process at the
// level internal/cpu selected, and NewBF16Compute's bf16-compute kernel
// where one runs (see BF16Kernel), e.g. "gemm avx512asm14x32, gemv
// avx512asm8, pack avx512, bf16 compute amxbf16asm32x32", for --version
// and bench records.
func KernelInfo() string {
	s := fmt.Sprintf("gemm %s, gemv %s, pack %s", gemmKernels[0].name, gemvKernels[0].name, packName)
	if k, _, _ := cpu.BF16Choice(); k != cpu.BF16Widen {
		s += ", bf16 compute " + bf16KernelName(k)
	}
	return s
}

// registerGemm adds a kernel that this CPU can run (called from init).
func registerGemm(k *gemmKernel) {
	gemmKernels = append(gemmKernels, k)
	sort.SliceStable(gemmKernels, func(i, j int) bool { return gemmKernels[i].prio > gemmKernels[j].prio })
}

// registerGemv adds a small-M kernel that this CPU can run (called from init).
func registerGemv(k *gemvKernel) {
	gemvKernels = append(gemvKernels, k)
	sort.SliceStable(gemvKernels, func(i, j int) bool { return gemvKernels[i].prio > gemvKernels[j].prio })
}

// genericGemm is the portable 4×2 micro-kernel (tile_portable.go, from
// internal/kernelgen/linalg/portable): the tile shape the Go compiler keeps
// in registers.
var genericGemm = &gemmKernel{name: "go4x2", mr: 4, nr: 2, prio: 0, tile: goTile4x2}

//go:generate go run github.com/qwenref/qwenref/internal/kernelgen linalg

func goTile4x2(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	var t [8]float32
	if rows == 4 {
		goTile4x2Full(kc, a, b, &t)
	} else {
		// Bottom edge: the same k order, one row at a time.
		for i := 0; i < rows; i++ {
			var s0, s1 float32
			for k := 0; k < kc; k++ {
				ai := a[k*rows+i]
				s0 += ai * b[2*k]
				s1 += ai * b[2*k+1]
			}
			t[2*i], t[2*i+1] = s0, s1
		}
	}
	for i := 0; i < rows; i++ {
		ci := c[i*ldc : i*ldc+cols]
		for j := range ci {
			if acc {
				ci[j] += t[2*i+j]
			} else {
				ci[j] = t[2*i+j]
			}
		}
	}
}

// genericGemv is the portable small-M kernel.
var genericGemv = &gemvKernel{name: "go", prio: 0, maxM: 2, f32: goGemvF32, bf16: goGemvBF16}

func goGemvF32(y []float32, ldy int, x []float32, m, k int, w []float32) {
	for r := 0; r < len(w)/k; r++ {
		wr := w[r*k : (r+1)*k]
		for i := 0; i < m; i++ {
			y[i*ldy+r] = dotGo(x[i*k:(i+1)*k], wr)
		}
	}
}

func goGemvBF16(y []float32, ldy int, x []float32, m, k int, w []uint16) {
	for r := 0; r < len(w)/k; r++ {
		wr := w[r*k : (r+1)*k]
		for i := 0; i < m; i++ {
			y[i*ldy+r] = dotGoBF16(x[i*k:(i+1)*k], wr)
		}
	}
}

// dotGo is a float32 dot product with four independent partial sums, so the
// additions do not wait on each other.
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	j := 0
	for ; j+4 <= len(a); j += 4 {
		s0 += a[j] * b[j]
		s1 += a[j+1] * b[j+1]
		s2 += a[j+2] * b[j+2]
		s3 += a[j+3] * b[j+3]
	}
	for ; j < len(a); j++ {
		s0 += a[j] * b[j]
	}
	return (s0 + s1) + (s2 + s3)
}

// dotGoBF16 is dotGo with the bf16 weights widened as they are read.
func dotGoBF16(a []float32, b []uint16) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	j := 0
	for ; j+4 <= len(a); j += 4 {
		s0 += a[j] * math.Float32frombits(uint32(b[j])<<16)
		s1 += a[j+1] * math.Float32frombits(uint32(b[j+1])<<16)
		s2 += a[j+2] * math.Float32frombits(uint32(b[j+2])<<16)
		s3 += a[j+3] * math.Float32frombits(uint32(b[j+3])<<16)
	}
	for ; j < len(a); j++ {
		s0 += a[j] * math.Float32frombits(uint32(b[j])<<16)
	}
	return (s0 + s1) + (s2 + s3)
}

// The 8-row streaming kernels of the AVX2 and NEON levels: y[r] = x·W[r]
// for r < rows ≤ 8, over the first k values (k a multiple of 8), W's rows
// ldw elements apart. Index 0 is nil, index r takes r rows.
type (
	rows8F32  = [9]func(k int, x *float32, w *float32, ldw int, y *float32)
	rows8BF16 = [9]func(k int, x *float32, w *uint16, ldw int, y *float32)
)

// streamRows8F32 runs an 8-row streaming kernel over every row of w (m x
// rows against each group of 8 W rows, so the group stays in L1/L2 while W
// is read from memory once) and adds the last k%8 terms in Go.
func streamRows8F32(kern *rows8F32, y []float32, ldy int, x []float32, m, k int, w []float32) {
	k8 := k &^ 7
	rows := len(w) / k
	for r := 0; r < rows; r += 8 {
		nr := min(8, rows-r)
		wr := w[r*k : (r+nr)*k]
		for i := 0; i < m; i++ {
			xi, yi := x[i*k:(i+1)*k], y[i*ldy+r:i*ldy+r+nr]
			kern[nr](k8, &xi[0], &wr[0], k, &yi[0])
			if k8 < k {
				for q := range yi {
					yi[q] += dotGo(xi[k8:], wr[q*k+k8:(q+1)*k])
				}
			}
		}
	}
}

// streamRows8BF16 is streamRows8F32 for bf16 weights.
func streamRows8BF16(kern *rows8BF16, y []float32, ldy int, x []float32, m, k int, w []uint16) {
	k8 := k &^ 7
	rows := len(w) / k
	for r := 0; r < rows; r += 8 {
		nr := min(8, rows-r)
		wr := w[r*k : (r+nr)*k]
		for i := 0; i < m; i++ {
			xi, yi := x[i*k:(i+1)*k], y[i*ldy+r:i*ldy+r+nr]
			kern[nr](k8, &xi[0], &wr[0], k, &yi[0])
			if k8 < k {
				for q := range yi {
					yi[q] += dotGoBF16(xi[k8:], wr[q*k+k8:(q+1)*k])
				}
			}
		}
	}
}
