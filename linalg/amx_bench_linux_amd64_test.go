package linalg

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
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
