//go:build amd64 || arm64

package vecmath

import (
	"sync"
	"unsafe"

	"github.com/qwenref/qwenref/internal/cpu"
)

// The assembly binding: vecmath_<arch>.s holds the kernels and
// vecmath_<arch>_gen.go their declarations and the table asmLevels, both
// written by internal/kernelgen.

// asmLevel is one level's assembly kernels, as the generated table lists
// them; each takes whole vectors of lanes values.
type asmLevel struct {
	level      cpu.Level
	name       string
	lanes      int
	exp        func(dst, x *float32, n int)
	silu       func(dst, x *float32, n int)
	sigmoid    func(dst, x *float32, n int)
	siluMul    func(dst, x, y *float32, n int)
	mulSigmoid func(dst, x, y *float32, n int)
	sumSquares func(x *float32, n int) float64
}

func init() {
	for _, a := range asmLevels {
		asmKernels = append(asmKernels, kernels{
			level:      a.level,
			name:       a.name,
			exp:        unary(a.exp, a.lanes, expPortable),
			silu:       unary(a.silu, a.lanes, siluPortable),
			sigmoid:    unary(a.sigmoid, a.lanes, sigmoidPortable),
			siluMul:    binary(a.siluMul, a.lanes, siluMulPortable),
			mulSigmoid: binary(a.mulSigmoid, a.lanes, mulSigmoidPortable),
			sumSquares: reduce(a.sumSquares, a.lanes),
		})
	}
	use(cpu.Selected())
}

// maxLanes bounds the lanes whose tail runs through the kernel, padded.
const maxLanes = 16

// tailBufs holds the padded tail's operands: the kernels are called
// through func values, so arrays on the stack would escape to the heap on
// every call; a pool keeps the hot loops free of allocations.
var tailBufs = sync.Pool{New: func() any { return new([3][maxLanes]float32) }}

// unary runs an assembly kernel over the whole vectors of x (dst is as long
// as x: the exported functions slice it), then over the rest padded to a
// whole vector, so that an element's bits do not depend on where it sits
// in x: rows give the same values however many share a call (a packed
// forward equals its samples run alone).
func unary(asm func(dst, x *float32, n int), lanes int, tail func(dst, x []float32)) func(dst, x []float32) {
	return func(dst, x []float32) {
		n := len(x) &^ (lanes - 1)
		if n > 0 {
			_ = dst[n-1]
			asm(unsafe.SliceData(dst), unsafe.SliceData(x), n)
		}
		if r := len(x) - n; r > 0 && lanes <= maxLanes {
			b := tailBufs.Get().(*[3][maxLanes]float32)
			xb, db := b[0][:lanes], b[1][:lanes]
			clear(xb[copy(xb, x[n:]):])
			asm(&db[0], &xb[0], lanes)
			copy(dst[n:], db[:r])
			tailBufs.Put(b)
		} else if r > 0 {
			tail(dst[n:], x[n:])
		}
	}
}

// binary is unary for kernels with a second operand as long as x.
func binary(asm func(dst, x, y *float32, n int), lanes int, tail func(dst, x, y []float32)) func(dst, x, y []float32) {
	return func(dst, x, y []float32) {
		n := len(x) &^ (lanes - 1)
		if n > 0 {
			_, _ = dst[n-1], y[n-1]
			asm(unsafe.SliceData(dst), unsafe.SliceData(x), unsafe.SliceData(y), n)
		}
		if r := len(x) - n; r > 0 && lanes <= maxLanes {
			b := tailBufs.Get().(*[3][maxLanes]float32)
			xb, yb, db := b[0][:lanes], b[1][:lanes], b[2][:lanes]
			clear(xb[copy(xb, x[n:]):])
			clear(yb[copy(yb, y[n:len(x)]):])
			asm(&db[0], &xb[0], &yb[0], lanes)
			copy(dst[n:], db[:r])
			tailBufs.Put(b)
		} else if r > 0 {
			tail(dst[n:], x[n:], y[n:])
		}
	}
}

// reduce is unary for a sum.
func reduce(asm func(x *float32, n int) float64, lanes int) func(x []float32) float64 {
	return func(x []float32) float64 {
		n := len(x) &^ (lanes - 1)
		var s float64
		if n > 0 {
			s = asm(unsafe.SliceData(x), n)
		}
		if n < len(x) {
			s += sumSquaresPortable(x[n:])
		}
		return s
	}
}
