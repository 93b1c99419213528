//go:build amd64 || arm64

package attention

import (
	"unsafe"

	"github.com/qwenref/qwenref/internal/cpu"
)

// The assembly binding: chunked_<arch>.s holds the kernels and
// chunked_<arch>_gen.go their declarations, their tables and asmLevels,
// all written by internal/kernelgen.

// tileFunc is one generated tile kernel (internal/kernelgen/attention/x86
// says what it computes).
type tileFunc func(kdim int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, rs *float32)

// asmLevel is one level's assembly kernels, as the generated table lists
// them: the tiles indexed by [registers−1][rows], and the softmax step.
type asmLevel struct {
	level   cpu.Level
	name    string
	lanes   int
	tiles   [][]tileFunc
	softmax func(st *float32, mp, jn int, m, l, corr *float32)
}

func init() {
	for _, a := range asmLevels {
		asmKernels = append(asmKernels, kernels{level: a.level, name: a.name, lanes: a.lanes,
			gemm: gemmAsm(a.tiles, a.lanes), softmax: softmaxAsm(a.softmax, a.lanes)})
	}
	kern = kernelsFor(cpu.Selected())
}

// gemmAsm runs the product in register tiles: lane chunks of two registers
// (then one for the edge) in the outer loop, so one panel of b serves every
// row group, and row groups as tall as the table has. Lane counts that are
// not a multiple of the register width (head dims no model uses) take the
// portable loop. Every bound is checked here, once, so the assembly can
// trust its pointers.
func gemmAsm(tiles [][]tileFunc, lanes int) func(rows, kdim int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, n int, rs []float32) {
	maxRows := len(tiles[0]) - 1
	return func(rows, kdim int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, n int, rs []float32) {
		if rows == 0 || kdim == 0 || n%lanes != 0 {
			gemmPortable(rows, kdim, a, ars, aks, b, ldb, c, ldc, n, rs)
			return
		}
		if len(a) <= (rows-1)*ars+(kdim-1)*aks || len(b) < (kdim-1)*ldb+n || len(c) < (rows-1)*ldc+n ||
			(rs != nil && len(rs) < rows) {
			panic("attention: gemm bounds") // unreachable: the tile code sizes every buffer
		}
		pa, pb, pc := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b)), unsafe.Pointer(unsafe.SliceData(c))
		var prs unsafe.Pointer
		if rs != nil {
			prs = unsafe.Pointer(unsafe.SliceData(rs))
		}
		for i := 0; i < n; {
			v := 2
			if n-i < 2*lanes {
				v = 1
			}
			for r := 0; r < rows; r += maxRows {
				h := min(maxRows, rows-r)
				var rsr *float32
				if prs != nil {
					rsr = (*float32)(unsafe.Add(prs, 4*r))
				}
				tiles[v-1][h](kdim, (*float32)(unsafe.Add(pa, 4*r*ars)), ars, aks, (*float32)(unsafe.Add(pb, 4*i)), ldb,
					(*float32)(unsafe.Add(pc, 4*(r*ldc+i))), ldc, rsr)
			}
			i += v * lanes
		}
	}
}

// softmaxAsm checks the bounds of a softmax step and runs the kernel.
func softmaxAsm(asm func(st *float32, mp, jn int, m, l, corr *float32), lanes int) func(st []float32, mp int, m, l, corr []float32) {
	return func(st []float32, mp int, m, l, corr []float32) {
		jn := len(st) / mp
		if jn == 0 || mp%lanes != 0 || len(m) < mp || len(l) < mp || len(corr) < mp {
			panic("attention: softmax bounds") // unreachable: runTile sizes every buffer
		}
		asm(unsafe.SliceData(st), mp, jn, unsafe.SliceData(m), unsafe.SliceData(l), unsafe.SliceData(corr))
	}
}
