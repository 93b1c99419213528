package linalg

import (
	"runtime"
	"sync"
	"testing"

	"github.com/qwenref/qwenref/internal/cpu"
)

// BenchmarkBF16DotPeak is the ceiling the bf16-pair GEMM is measured
// against: the 14×32 VDPBF16PS micro-kernel alone, its operands in L1,
// on every core at once (GOMAXPROCS goroutines). The GEMM's GFLOP/s over
// this one, in the same run, is how much of the machine it gets.
//
//	go test ./linalg -run '^$' -bench 'BF16DotPeak|BF16Dot/' -count 3
func BenchmarkBF16DotPeak(b *testing.B) {
	if !cpu.HasBF16() {
		b.Skip("needs AVX512_BF16 at kernel level avx512")
	}
	const kc, calls = 256, 20000
	threads := runtime.GOMAXPROCS(0)
	for b.Loop() {
		var wg sync.WaitGroup
		for range threads {
			wg.Go(func() {
				a := make([]float32, kc*14)
				w := make([]float32, kc*32)
				c := make([]float32, 14*32)
				for range calls {
					sbdot14x32(kc, &a[0], &w[0], &c[0], 32, 1<<32-1, 0)
				}
			})
		}
		wg.Wait()
	}
	flop := float64(threads) * calls * kc * 14 * 32 * 4 // 2 k and 2 FLOP per pair
	b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
