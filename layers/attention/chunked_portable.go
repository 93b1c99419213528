package attention

import (
	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath"
)

// kernels are the tile product and softmax step of one level.
type kernels struct {
	level cpu.Level
	name  string
	lanes int // float32 lanes per register: the tiles' row padding
	// gemm computes, for r < rows and lanes i < lanes,
	//
	//	c[r·ldc+i] = rs[r]·c[r·ldc+i] + Σ_{k<kdim} a[r·ars+k·aks] · b[k·ldb+i]
	//
	// with the rs term left out (c overwritten) when rs is nil. The strided
	// A serves both products of a tile with no packing: key rows against
	// Qᵀ, and probabilities (read down Sᵀ) against value rows, where rs is
	// the online softmax's per-row rescale.
	gemm func(rows, kdim int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, lanes int, rs []float32)
	// softmax is one online-softmax step over a block of scores st [jn][mp]
	// (jn = len(st)/mp, mp a multiple of lanes), lane i being one query row:
	//
	//	m' = max(m, max_j st[j]),  corr = e^(m−m'),  st[j] ← e^(st[j]−m'),
	//	l ← l·corr + Σ_j st[j],   m ← m'.
	//
	// Masked scores are −Inf and become 0. Block 0 always holds key 0,
	// which every row sees, so m is finite from then on and corr = 0 there.
	softmax func(st []float32, mp int, m, l, corr []float32)
}

// kern is the level's kernels: portable, or on amd64 and arm64 the
// assembly of cpu.Selected(), chosen in chunked_asm.go's init.
var kern = portable

// asmKernels are the assembly levels of this build, which chunked_asm.go
// adds from the generated tables (none on other architectures).
var asmKernels []kernels

// kernelsFor returns the kernels of level l: its assembly if this build
// has it, else the portable ones.
func kernelsFor(l cpu.Level) kernels {
	for _, k := range asmKernels {
		if k.level == l {
			return k
		}
	}
	return portable
}

// KernelInfo names the kernels Chunked runs, e.g. "attention:avx2 vecmath:avx2".
func KernelInfo() string { return "attention:" + kern.name + " " + vecmath.KernelInfo() }

var portable = kernels{level: cpu.Portable, name: "portable", lanes: 8, gemm: gemmPortable, softmax: softmaxPortable}

func gemmPortable(rows, kdim int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc, lanes int, rs []float32) {
	for r := range rows {
		cr := c[r*ldc : r*ldc+lanes]
		if rs != nil {
			f := rs[r]
			for i := range cr {
				cr[i] *= f
			}
		} else {
			clear(cr)
		}
		for kk := range kdim {
			x := a[r*ars+kk*aks]
			br := b[kk*ldb : kk*ldb+lanes]
			cr := cr[:len(br)] // same length: no bounds checks in the loop
			for i, y := range br {
				cr[i] += x * y
			}
		}
	}
}

func softmaxPortable(st []float32, mp int, m, l, corr []float32) {
	jn := len(st) / mp
	m, l, corr = m[:mp], l[:mp], corr[:mp]
	for i := range mp {
		mx := m[i]
		for j := range jn {
			mx = max(mx, st[j*mp+i])
		}
		var sum float32
		for j := range jn {
			p := vecmath.Exp32(st[j*mp+i] - mx)
			st[j*mp+i] = p
			sum += p
		}
		corr[i] = vecmath.Exp32(m[i] - mx)
		l[i] = l[i]*corr[i] + sum
		m[i] = mx
	}
}
