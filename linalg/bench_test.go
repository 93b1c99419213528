package linalg

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// benchShapes are {M, K, N}: the GEMM (x [2048,5120], W
// [10240,5120]), a mid-size prefill chunk, decode GEMV into the MLP width,
// and small batches.
var benchShapes = [][3]int{
	{2048, 5120, 10240},
	{512, 5120, 5120},
	{1, 5120, 17408},
	{4, 5120, 17408},
	{16, 5120, 17408},
	{64, 5120, 17408},
}

// BenchmarkMatMul reports GFLOP/s (2·M·N·K per product) and the weight
// traffic in GB/s (W's bytes once per product: what bounds the M=1 GEMV).
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, bf16 := range []bool{false, true} {
		for _, s := range benchShapes {
			m, k, n := s[0], s[1], s[2]
			b.Run(fmt.Sprintf("%s/%dx%dx%d", dtypeName(bf16), m, k, n), func(b *testing.B) {
				benchProduct(b, Blocked{}, r, m, k, n, bf16)
			})
		}
	}
}

// BenchmarkBF16Dot is the bf16-compute product (NewBF16Compute: x rounded
// to bf16, VDPBF16PS) on the GEMM shapes, with bf16 weights. It skips where
// NewBF16Compute refuses: the pure-Go model would take minutes per product.
func BenchmarkBF16Dot(b *testing.B) {
	if _, err := NewBF16Compute(); err != nil {
		b.Skip(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for _, s := range benchShapes {
		m, k, n := s[0], s[1], s[2]
		if m < 16 {
			continue
		}
		b.Run(fmt.Sprintf("bf16/%dx%dx%d", m, k, n), func(b *testing.B) {
			benchProduct(b, BlockedBF16Dot{}, r, m, k, n, true)
		})
	}
}

// BenchmarkBF16Kernels runs every bf16-compute kernel this process can run
// (QWENREF_BF16's choices: widen is Blocked, avx512bf16 BlockedBF16Dot,
// amx BlockedAMX) on bf16 weights, at the GEMM, a prefill chunk
// and the small T of decode and short prompts, in one run so their ratios
// share the load:
//
//	go test ./linalg -run '^$' -bench BF16Kernels -count 5
func BenchmarkBF16Kernels(b *testing.B) {
	kernels := []struct {
		name string
		mm   MatMuler
		ok   bool
	}{
		{cpu.BF16Widen.String(), Blocked{}, true},
		{cpu.BF16AVX512.String(), BlockedBF16Dot{}, cpu.HasBF16()},
		{cpu.BF16AMX.String(), BlockedAMX{}, cpu.AMX() == nil},
	}
	r := rand.New(rand.NewPCG(7, 7))
	shapes := [][3]int{{2048, 5120, 10240}, {512, 5120, 5120}}
	for _, m := range []int{1, 2, 4, 8, 16, 64} {
		shapes = append(shapes, [3]int{m, 5120, 17408})
	}
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		for _, kn := range kernels {
			if !kn.ok {
				continue
			}
			b.Run(fmt.Sprintf("%s/%dx%dx%d", kn.name, m, k, n), func(b *testing.B) {
				benchProduct(b, kn.mm, r, m, k, n, true)
			})
		}
	}
}

// BenchmarkKernels compares the micro-kernels this build and CPU can run on
// one mid-size shape, all with the same blocking and threads.
func BenchmarkKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	m, k, n := 256, 1024, 1024
	for _, gk := range gemmKernels {
		b.Run(fmt.Sprintf("%s/%dx%dx%d", gk.name, m, k, n), func(b *testing.B) {
			benchProduct(b, Blocked{gemm: gk}, r, m, k, n, false)
		})
	}
	m, k, n = 1, 5120, 17408
	for _, gv := range gemvKernels {
		for _, bf16 := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s-%s/%dx%dx%d", gv.name, dtypeName(bf16), m, k, n), func(b *testing.B) {
				benchProduct(b, Blocked{gemv: gv}, r, m, k, n, bf16)
			})
		}
	}
}

// BenchmarkPortable puts the portable level (Go kernels and Go packing, as
// under QWENREF_CPU=portable or on a GOARCH without assembly) beside gonum's
// Sgemm (C = A·Bᵀ, same threads) and Naive, in one run so the ratios share
// the load. Naive runs on the small shape only.
func BenchmarkPortable(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, s := range [][3]int{{256, 1024, 1024}, {512, 5120, 5120}} {
		m, k, n := s[0], s[1], s[2]
		shape := fmt.Sprintf("%dx%dx%d", m, k, n)
		b.Run("portable/"+shape, func(b *testing.B) {
			defer withPackers(cpu.Portable)()
			benchProduct(b, Blocked{gemm: genericGemm, gemv: genericGemv}, r, m, k, n, false)
		})
		b.Run("gonum/"+shape, func(b *testing.B) { benchProduct(b, gonumNT{}, r, m, k, n, false) })
		if m*k*n <= 1<<28 {
			b.Run("naive/"+shape, func(b *testing.B) { benchProduct(b, Naive{}, r, m, k, n, false) })
		}
	}
}

// gonumNT is gonum's Sgemm as a MatMuler (float32 weights only).
type gonumNT struct{}

func (gonumNT) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := CheckDims(y, x, m, w); err != nil {
		return err
	}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1,
		blas32.General{Rows: m, Cols: w.Cols, Stride: w.Cols, Data: x},
		blas32.General{Rows: w.Rows, Cols: w.Cols, Stride: w.Cols, Data: w.F32}, 0,
		blas32.General{Rows: m, Cols: w.Rows, Stride: w.Rows, Data: y})
	return nil
}

// BenchmarkPack measures the packing transposes (elements per second), the
// overhead that Blocked adds on top of the micro-kernel.
func BenchmarkPack(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	k, kc := 5120, defaultBlocking.kc
	dst := make([]float32, kc*32)
	for _, bf16 := range []bool{false, true} {
		w := randWeights(r, 32, k, bf16)
		b.Run("W-"+dtypeName(bf16), func(b *testing.B) {
			for b.Loop() {
				for k0 := 0; k0 < k; k0 += kc {
					packB(dst, w, 32, 0, 32, k0, kc)
				}
			}
			b.ReportMetric(float64(32*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
	x := randVec(r, 14*k)
	b.Run("x", func(b *testing.B) {
		for b.Loop() {
			for k0 := 0; k0 < k; k0 += kc {
				packA(dst, x, k, 0, 14, k0, kc)
			}
		}
		b.ReportMetric(float64(14*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
}

// BenchmarkStreamRead is the memory-bandwidth yardstick for the GEMV GB/s:
// every goroutine XORs its share of a 256 MiB buffer, 8 bytes per load.
func BenchmarkStreamRead(b *testing.B) {
	buf := make([]uint64, 32<<20)
	for i := range buf {
		buf[i] = uint64(i)
	}
	threads := runtime.GOMAXPROCS(0)
	sink := make([]uint64, threads*8) // one cache line per goroutine
	for b.Loop() {
		var wg sync.WaitGroup
		for t := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lo, hi := len(buf)*t/threads, len(buf)*(t+1)/threads
				var a0, a1, a2, a3 uint64
				p := buf[lo:hi]
				for i := 0; i+4 <= len(p); i += 4 {
					a0 ^= p[i]
					a1 ^= p[i+1]
					a2 ^= p[i+2]
					a3 ^= p[i+3]
				}
				sink[8*t] = a0 ^ a1 ^ a2 ^ a3
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(len(buf))*float64(unsafe.Sizeof(buf[0]))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

func benchProduct(b *testing.B, mm MatMuler, r *rand.Rand, m, k, n int, bf16 bool) {
	x := randVec(r, m*k)
	w := randWeights(r, n, k, bf16)
	y := make([]float32, m*n)
	b.ResetTimer()
	cpu0 := processCPUSeconds()
	for b.Loop() {
		if err := mm.MatMulT(y, x, m, w); err != nil {
			b.Fatal(err)
		}
	}
	cpu := processCPUSeconds() - cpu0
	reportRates(b, m, k, n, w.Bytes())
	if cpu > 0 {
		// The machine is shared: this is the rate had each goroutine had
		// its core to itself (FLOPs per CPU-second times GOMAXPROCS). It
		// still pays for cache and DRAM traffic of the other tenants.
		b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/cpu*float64(runtime.GOMAXPROCS(0))/1e9, "cpuGFLOP/s")
	}
}

func reportRates(b *testing.B, m, k, n int, wBytes int64) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)/sec/1e9, "GFLOP/s")
	b.ReportMetric(float64(wBytes)/sec/1e9, "GB/s")
}

// BenchmarkGEMMLevels runs the GEMM (f32 weights, 2048×5120×10240)
// with the GEMM kernel of every level this CPU runs, in one process, so
// their ratios are measured under the same load. Each kernel runs with the
// packing of its own level (the AVX-512 transposes only for the AVX-512
// kernel), as it would under QWENREF_CPU. The portable kernel takes about
// 15 s per product: leave it out with -bench 'GEMMLevels/(avx|neon)'.
func BenchmarkGEMMLevels(b *testing.B) {
	r := rand.New(rand.NewPCG(6, 6))
	m, k, n := 2048, 5120, 10240
	for _, gk := range gemmKernels {
		b.Run(gk.name, func(b *testing.B) {
			defer withPackers(gk.level)()
			benchProduct(b, Blocked{gemm: gk}, r, m, k, n, false)
		})
	}
}

// withPackers switches off the packing transposes above level (AVX-512
// ones below avx512, AVX2 and NEON ones at portable) and returns the function that
// restores them. Benchmarks only: the kernels read the package variables
// without locking.
func withPackers(level cpu.Level) func() {
	f, bf, f8, bf8, f4, bf4 := tposeF32, tposeBF16, tpose8F32, tpose8BF16, tpose4F32, tpose4BF16
	if level != cpu.AVX512 {
		tposeF32, tposeBF16 = nil, nil
	}
	if level == cpu.Portable {
		tpose8F32, tpose8BF16, tpose4F32, tpose4BF16 = nil, nil, nil, nil
	}
	return func() { tposeF32, tposeBF16, tpose8F32, tpose8BF16, tpose4F32, tpose4BF16 = f, bf, f8, bf8, f4, bf4 }
}
