//go:build amd64 || arm64

package conv1d

import (
	"unsafe"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath"
)

// The assembly binding: chunked_<arch>.s holds the kernels and
// chunked_<arch>_gen.go their declarations and the table asmLevels, both
// written by internal/kernelgen.

// asmLevel is one level's assembly kernels, as the generated table lists
// them; each takes whole vectors of lanes channels.
type asmLevel struct {
	level   cpu.Level
	name    string
	lanes   int
	row4    func(n int, y, r0, r1, r2, r3, w0, w1, w2, w3 *float32)
	rows4x4 func(n, c int, y, x, w *float32)
}

func init() {
	for _, a := range asmLevels {
		asmKernels = append(asmKernels, kernels{level: a.level, name: a.name,
			row4: row4Asm(a.row4, a.lanes), rows4x4: rows4x4Asm(a.rows4x4, a.lanes)})
	}
	kern = kernelsFor(cpu.Selected())
}

// row4Asm runs an assembly row kernel over whole vectors of channels and
// the portable loop over the rest. Every slice is checked against the row
// length once, so the assembly can trust them.
func row4Asm(asm func(n int, y, r0, r1, r2, r3, w0, w1, w2, w3 *float32), lanes int) func(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32) {
	return func(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32) {
		n := len(y)
		r0, r1, r2, r3 = r0[:n], r1[:n], r2[:n], r3[:n]
		w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
		full := n &^ (lanes - 1)
		if full > 0 {
			asm(full, ptr(y), ptr(r0), ptr(r1), ptr(r2), ptr(r3), ptr(w0), ptr(w1), ptr(w2), ptr(w3))
		}
		if full < n {
			row4Tail(y[full:], r0[full:], r1[full:], r2[full:], r3[full:], w0[full:], w1[full:], w2[full:], w3[full:])
		}
	}
}

// rows4x4Asm is row4Asm for the four-row kernel.
func rows4x4Asm(asm func(n, c int, y, x, w *float32), lanes int) func(y, x []float32, c int, wt []float32) {
	return func(y, x []float32, c int, wt []float32) {
		_, _, _ = y[4*c-1], x[7*c-1], wt[4*c-1]
		full := c &^ (lanes - 1)
		if full > 0 {
			asm(full, c, ptr(y), ptr(x), ptr(wt))
		}
		if full < c {
			for o := range 4 {
				row4Tail(y[o*c+full:(o+1)*c], x[o*c+full:(o+1)*c], x[(o+1)*c+full:(o+2)*c], x[(o+2)*c+full:(o+3)*c],
					x[(o+3)*c+full:(o+4)*c], wt[full:c], wt[c+full:2*c], wt[2*c+full:3*c], wt[3*c+full:4*c])
			}
		}
	}
}

// row4Tail is the ragged channel tail (fewer than one vector) of both
// kernels: the same order of operations whichever kernel calls it, so a
// split sequence gives the same bits.
func row4Tail(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32) {
	n := len(y)
	r0, r1, r2, r3 = r0[:n], r1[:n], r2[:n], r3[:n]
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for i := range y {
		y[i] = vecmath.SiLU32(w0[i]*r0[i] + w1[i]*r1[i] + w2[i]*r2[i] + w3[i]*r3[i])
	}
}

func ptr(s []float32) *float32 { return unsafe.SliceData(s) }
