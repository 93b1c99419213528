//go:build !linux

package gateddelta_test

// processCPU is unavailable here; benchmarks then omit cpu-ms/op.
func processCPU() float64 { return -1 }
