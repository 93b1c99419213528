//go:build !amd64

package linalg

import "github.com/qwenref/qwenref/tensor"

// runAMX is never reached off amd64: cpu.AMX refuses first.
func runAMX(bl *amxBlocks, y, x []float32, m int, w *tensor.Matrix, threads int) {
	panic("linalg: the AMX kernel exists on amd64 only")
}

const amxSmallMaxM = 16

// runAMXSmallM is never reached off amd64: cpu.AMX refuses first.
func runAMXSmallM(y, x []float32, m int, w *tensor.Matrix, threads int) {
	panic("linalg: the AMX kernel exists on amd64 only")
}
