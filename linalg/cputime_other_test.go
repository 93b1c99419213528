//go:build !unix

package linalg

// processCPUSeconds is unavailable here; the CPU-time metric is skipped.
func processCPUSeconds() float64 { return 0 }
