package gateddelta

import "github.com/qwenref/qwenref/internal/cpu"

// neonKernels is the arm64 set: NEON assembly (tiles_arm64.s,
// recurrent_arm64.s) for the GEMM tiles (4×16: 16 accumulators of 4
// lanes), the vector helpers and the recurrence's blocks.
var neonKernels = &kernels{
	level: cpu.NEON,
	tiles: []gemmTile{
		{16, "4x16", tile4x16NEON}, {8, "4x8", tile4x8NEON},
	},
	gemmTail:  gemmPortable,
	expAffine: expAffineNEON,
	axpy:      vecAxpy(4, axpyNEON),
	scaleCopy: vecScaleCopy(4, scaleCopyNEON),
	mulScaled: vecMulScaled(4, mulScaledNEON),
	triInvAcc: vecTriInvAcc(triInvAcc64NEON),
	recWidths: []int{16, 8},
	recBlock:  asmRecBlock(8, recBlock16NEON, recBlock8NEON),
	vecName:   "neon",
}

// levelKernels returns the set for level l.
func levelKernels(l cpu.Level) *kernels {
	if l == cpu.NEON {
		return neonKernels
	}
	return portableKernels
}

// levelsHere lists the sets this CPU can run, best first.
func levelsHere() []*kernels {
	var ks []*kernels
	for _, l := range cpu.Supported() {
		ks = append(ks, levelKernels(l))
	}
	return ks
}

//go:noescape
func tile4x16NEON(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func tile4x8NEON(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func axpyNEON(y *float32, a float32, x *float32, n int)

//go:noescape
func scaleCopyNEON(dst, src *float32, a float32, n int)

//go:noescape
func mulScaledNEON(dst, x, y *float32, a float32, n int)

//go:noescape
func triInvAcc64NEON(dst, tm, nr *float32, ldt, cnt int)

// expAffineNEON forms the exponents a + b·src in float64 in Go (NEON's
// float64 lanes are only two wide, and rounding each to float32 is what
// the amd64 kernels do too), bounds them above by expClamp so every result
// is finite, as on amd64, then runs the vector exp over them in place.
func expAffineNEON(dst []float32, src []float64, a, b float64) {
	src = src[:len(dst)]
	n := len(dst) &^ 3
	for i := range dst[:n] {
		dst[i] = float32(min(a+b*src[i], expClamp))
	}
	if n > 0 {
		expNEON(&dst[0], n)
	}
	expAffinePortable(dst[n:], src[n:], a, b)
}

//go:noescape
func expNEON(x *float32, n int)
