package gateddelta

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/cpu"
)

// The assembly of every architecture is generated here, whatever the host.
//go:generate go run github.com/qwenref/qwenref/internal/kernelgen layers/gateddelta

// kernels is one kernel level's set of inner loops: the small GEMM with its
// triangular modes, the vector helpers of the chunk step and the column
// block of the fused recurrence. The portable set is tiles_portable.go's;
// tiles_asm.go builds the assembly levels' sets from the generated tables;
// levelKernels picks one per cpu.Level.
type kernels struct {
	level cpu.Level
	// tiles are the GEMM's register tiles, widest first; each covers four
	// rows of C and cols columns.
	tiles []gemmTile
	// gemmTail computes the rows and columns no tile covers; the portable
	// set has no tiles and runs the whole product through it.
	gemmTail func(i0, i1, j0, j1, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32)

	expAffine func(dst []float32, src []float64, a, b float64)
	axpy      func(y []float32, a float32, x []float32)
	scaleCopy func(dst, src []float32, a float32)
	mulScaled func(dst, x, y []float32, a float32)
	triInvAcc func(dst, tm, nr []float32, n, j0, r int)

	// recWidths are the column-block widths recBlock runs fast, widest
	// first; a remainder narrower than the last runs the portable block.
	recWidths []int
	recBlock  func(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int)
	// vecName says what the vector helpers run, for KernelInfo.
	vecName string
}

// gemmTile is one register tile: C[0:4][0:cols] = beta·C + al[i]·(A·B)
// over kk steps, with A addressed as a[i·lda + p·aks] and B rows ldb apart
// (strides in floats). beta == 0 never reads C.
type gemmTile struct {
	cols int
	name string
	run  func(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)
}

// active is the set every kernel in this package runs: portable, or on
// amd64 and arm64 the set of cpu.Selected(), chosen in tiles_asm.go's init.
var active = portableKernels

// asmKernels are the assembly sets of this build, which tiles_asm.go adds
// from the generated tables (none on other architectures).
var asmKernels []*kernels

// levelKernels returns the set for level l: its assembly if this build
// has it, else the portable set.
func levelKernels(l cpu.Level) *kernels {
	for _, k := range asmKernels {
		if k.level == l {
			return k
		}
	}
	return portableKernels
}

// levelsHere lists the sets this build and CPU can run, best first.
func levelsHere() []*kernels {
	var ks []*kernels
	for _, l := range cpu.Supported() {
		ks = append(ks, levelKernels(l))
	}
	return ks
}

// KernelInfo names the kernel level and the inner loops Chunked and
// Recurrent run in this process, e.g. "avx512: gemm tiles 4x64/4x32/4x16,
// recurrent blocks 32/16, vector helpers avx512".
func KernelInfo() string { return active.describe() }

func (ks *kernels) describe() string {
	tiles := "portable"
	if len(ks.tiles) > 0 {
		tiles = ""
		for i, t := range ks.tiles {
			if i > 0 {
				tiles += "/"
			}
			tiles += t.name
		}
	}
	blocks := ""
	for i, w := range ks.recWidths {
		if i > 0 {
			blocks += "/"
		}
		blocks += fmt.Sprint(w)
	}
	return fmt.Sprintf("%s: gemm tiles %s, recurrent blocks %s, vector helpers %s", ks.level, tiles, blocks, ks.vecName)
}

// triMode tells gemm which part of a square product is structurally zero
// or unwanted, so the triangular products of the chunk step skip work.
type triMode int

const (
	triNone   triMode = iota
	triLowerA         // A[i][p] == 0 for p > i: row i reads only p ≤ i
	triLowerC         // only C[i][j] for j ≤ i is wanted; others may hold anything finite
)

// gemm computes C = beta·C + alpha·diag(rs)·A·B for an m×n C (row stride
// ldc), an m×k A addressed as a[i*lda + p*aks] (so aks = lda, lda = 1 reads
// Aᵀ of a row-major matrix) and a k×n B (row stride ldb). rs, if not nil,
// scales row i of the product by rs[i] (a diagonal factor folded into the
// write-back instead of into a scaled copy of A). beta == 0 never reads C,
// so C may hold garbage. tri restricts the work as documented on triMode;
// the results it promises are exact, the rest is unspecified.
func (ks *kernels) gemm(m, n, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	if m == 0 || n == 0 || k == 0 || len(ks.tiles) == 0 {
		ks.gemmTail(0, m, 0, n, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
		return
	}
	// One check on the extreme index of each operand lets the tiles index
	// through raw pointers.
	_ = a[(m-1)*lda+(k-1)*aks]
	_ = b[(k-1)*ldb+n-1]
	_ = c[(m-1)*ldc+n-1]
	if rs != nil {
		_ = rs[m-1]
	}
	m4 := m &^ 3
	j0 := 0
	// One α row for every tile of the call: passed to the tiles through a
	// func value, it escapes, and one allocation per tile was 80k per
	// 27B core call at T = 512.
	al := new([4]float32)
	for _, t := range ks.tiles {
		if tri == triLowerC && t.cols > 32 {
			continue // wide tiles would compute too much right of the diagonal
		}
		for ; j0+t.cols <= n; j0 += t.cols {
			i0 := 0
			if tri == triLowerC {
				i0 = j0 &^ 3 // row tiles above it lie wholly right of the diagonal
			}
			for ; i0 < m4; i0 += 4 {
				kk := k
				if tri == triLowerA {
					kk = min(k, i0+4)
				}
				*al = [4]float32{alpha, alpha, alpha, alpha}
				if rs != nil {
					*al = [4]float32{alpha * rs[i0], alpha * rs[i0+1], alpha * rs[i0+2], alpha * rs[i0+3]}
				}
				t.run(kk, &a[i0*lda], lda, aks, &b[j0], ldb, &c[i0*ldc+j0], ldc, al, beta)
			}
		}
	}
	if m4 < m {
		ks.gemmTail(m4, m, 0, j0, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
	}
	if j0 < n {
		ks.gemmTail(0, m, j0, n, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
	}
}

// recBlockWidth picks the next column block width for rem columns left.
func (ks *kernels) recBlockWidth(rem int) int {
	for _, w := range ks.recWidths {
		if rem >= w {
			return w
		}
	}
	return min(rem, recPortableWidth)
}
