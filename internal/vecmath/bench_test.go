package vecmath

import (
	"testing"

	"github.com/qwenref/qwenref/internal/cpu"
)

// BenchmarkSiLU runs the slice SiLU over 64K values (in L2) at every level.
func BenchmarkSiLU(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%200)*0.1 - 10
	}
	y := make([]float32, len(x))
	defer use(cpu.Selected())
	for _, l := range cpu.Supported() {
		b.Run(l.String(), func(b *testing.B) {
			use(l)
			b.SetBytes(int64(8 * len(x)))
			for b.Loop() {
				SiLU(y, x)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(x)), "ns/value")
		})
	}
}
