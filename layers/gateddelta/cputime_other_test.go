//go:build !linux

package gateddelta

// ProcessCPU is unavailable here; benchmarks then omit cpu-ms/op.
func ProcessCPU() float64 { return -1 }
