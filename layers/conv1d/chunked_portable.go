package conv1d

import (
	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath"
)

// kernels are the K = 4 row kernels of one level.
type kernels struct {
	level cpu.Level
	name  string
	// row4 computes y[i] = SiLU(w0·r0 + w1·r1 + w2·r2 + w3·r3) at every i.
	row4 func(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32)
	// rows4x4 computes four rows y [4][c] from the seven input rows
	// x [7][c] they read (x row m is time t0−3+m) and the taps wt [4][c].
	rows4x4 func(y, x []float32, c int, wt []float32)
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

// KernelInfo names the kernels Chunked runs, e.g. "conv1d:avx2 vecmath:avx2".
func KernelInfo() string { return "conv1d:" + kern.name + " " + vecmath.KernelInfo() }

// portable is plain Go: the pre-activations of a row are summed into y
// (w0·r0 first, Naive's order), then vecmath.SiLU runs over the row.
var portable = kernels{level: cpu.Portable, name: "portable", row4: row4Portable, rows4x4: rows4x4Portable}

func row4Portable(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32) {
	n := len(y)
	r0, r1, r2, r3 = r0[:n], r1[:n], r2[:n], r3[:n]
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for i := range y {
		y[i] = w0[i]*r0[i] + w1[i]*r1[i] + w2[i]*r2[i] + w3[i]*r3[i]
	}
	vecmath.SiLU(y, y)
}

func rows4x4Portable(y, x []float32, c int, wt []float32) {
	for o := range 4 {
		row4Portable(y[o*c:(o+1)*c], x[o*c:(o+1)*c], x[(o+1)*c:(o+2)*c], x[(o+2)*c:(o+3)*c], x[(o+3)*c:(o+4)*c],
			wt[:c], wt[c:2*c], wt[2*c:3*c], wt[3*c:4*c])
	}
}

// convRowK is row4 for any K: rows[j] feeds tap j, whose values are
// wt[j·ws : j·ws+len(y)].
func convRowK(y []float32, rows [][]float32, wt []float32, ws int) {
	n := len(y)
	w0, r0 := wt[:n], rows[0][:n]
	for i := range y {
		y[i] = w0[i] * r0[i]
	}
	for j, r := range rows[1:] {
		wj, r := wt[(j+1)*ws:(j+1)*ws+n], r[:n]
		for i := range y {
			y[i] += wj[i] * r[i]
		}
	}
	vecmath.SiLU(y, y)
}

// transposeTaps writes wt[j·n+i] = w[i·k+j]: tap-major, so each tap is a
// contiguous vector over the channels.
func transposeTaps(wt, w []float32, k, n int) {
	wt = wt[:k*n]
	if k == 4 {
		// The Qwen3.5 case without bounds checks: it is half of a decode
		// step's work (T = 1).
		w0, w1, w2, w3 := wt[:n], wt[n:2*n], wt[2*n:3*n], wt[3*n:4*n]
		w = w[:4*n]
		for i := range w0 {
			v := w[4*i : 4*i+4 : 4*i+4]
			w0[i], w1[i], w2[i], w3[i] = v[0], v[1], v[2], v[3]
		}
		return
	}
	for i := range n {
		for j, v := range w[i*k : (i+1)*k] {
			wt[j*n+i] = v
		}
	}
}
