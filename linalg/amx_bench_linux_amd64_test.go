package linalg

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/qwenref/qwenref/tensor"
)

// BenchmarkAMXKernel is the AMX micro-kernel alone, its operands in L2 (one
// 32-row block of x against four 32-column W panels over 160 steps, 5120
// k, C written once), in GFLOP per second of the thread's CPU time: with
// all-zero operands and with random bf16 ones, since the tile unit's rate
// depends on the data (on the Xeon of docs/perf.md random operands run at
// half the rate of zeros).
func BenchmarkAMXKernel(b *testing.B) {
	needAMX(b)
	const panels, ks = 4, 160
	for _, random := range []bool{false, true} {
		a := make([]uint16, ks*amxStep)
		w := make([]uint16, panels*ks*amxStep)
		if random {
			r := rand.New(rand.NewPCG(1, 2))
			for _, s := range [][]uint16{a, w} {
				for i := range s {
					s[i] = uint16(0x3f00 | r.Uint32()&0x80ff) // ±[0.5, 2)
				}
			}
		}
		const ldc = 10240
		y := make([]float32, 32*ldc)
		b.Run(fmt.Sprintf("random=%v", random), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var t0, t1 unix.Timespec
			unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t0)
			for b.Loop() {
				amxGemm32x32(&amxTileConfig[0], &a[0], &w[0], &y[0], ldc, ks, panels, 0, 2*ks*amxStep, 4*amxRows, 0, &a[0])
			}
			unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t1)
			flops := 2 * float64(amxRows*amxRows*amxK) * panels * ks * float64(b.N)
			b.ReportMetric(flops/(float64(t1.Nano()-t0.Nano())/1e9)/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkAMXPackShare measures, on one thread, the AMX product
// 2048×5120×10240's shape at m = 512 and 2048 beside the packing of its W
// alone (what every call does whatever m): the share of a call that does
// not grow with m (docs/perf.md, the 16-core clock check).
func BenchmarkAMXPackShare(b *testing.B) {
	needAMX(b)
	n, k := 10240, 5120
	r := rand.New(rand.NewPCG(1, 2))
	wb := make([]uint16, n*k)
	for i := range wb {
		wb[i] = tensor.Float32ToBF16(float32(r.NormFloat64() * 0.02))
	}
	w := &tensor.Matrix{Rows: n, Cols: k, BF16: wb}
	for _, m := range []int{512, 2048} {
		x := make([]float32, m*k)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		y := make([]float32, m*n)
		b.Run(fmt.Sprintf("gemm-m=%d", m), func(b *testing.B) {
			for b.Loop() {
				runAMX(&defaultAMXBlocks, y, x, m, w, 1)
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	b.Run("pack-w", func(b *testing.B) {
		kc := defaultAMXBlocks.kc
		buf := make([]uint16, ceilDiv(kc, amxK)*amxStep)
		for b.Loop() {
			for j0 := 0; j0 < n; j0 += amxRows {
				for k0 := 0; k0 < k; k0 += kc {
					kb := min(kc, k-k0)
					packBAMX(buf[:ceilDiv(kb, amxK)*amxStep], w, j0, min(amxRows, n-j0), k0, kb)
				}
			}
		}
	})
}
