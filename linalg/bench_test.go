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

// BenchmarkBF16Dot is the opt-in AVX512_BF16 product (x rounded to bf16)
// on the GEMM shapes, with bf16 weights.
func BenchmarkBF16Dot(b *testing.B) {
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

// BenchmarkGonum is the pure-Go baseline: gonum's Sgemm on the mid shape.
func BenchmarkGonum(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	m, k, n := 512, 5120, 5120
	x, w := randVec(r, m*k), randVec(r, n*k)
	c := blas32.General{Rows: m, Cols: n, Stride: n, Data: make([]float32, m*n)}
	b.Run(fmt.Sprintf("f32/%dx%dx%d", m, k, n), func(b *testing.B) {
		for b.Loop() {
			blas32.Gemm(blas.NoTrans, blas.Trans, 1,
				blas32.General{Rows: m, Cols: k, Stride: k, Data: x},
				blas32.General{Rows: n, Cols: k, Stride: k, Data: w}, 0, c)
		}
		reportRates(b, m, k, n, int64(n*k*4))
	})
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
