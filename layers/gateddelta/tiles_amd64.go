package gateddelta

import "github.com/qwenref/qwenref/internal/cpu"

// The AVX-512 and AVX2+FMA sets: generated assembly (tiles_amd64.s,
// recurrent_amd64.s) for the hot loops, the portable code for edges.
// AVX-512 runs 4×64 tiles (16 accumulators, four B vectors and four
// broadcasts of A per step); AVX2, with 16 vector registers, 4×16.
var (
	avx512Kernels = &kernels{
		level: cpu.AVX512,
		tiles: []gemmTile{
			{64, "4x64", tile4x64AVX512}, {32, "4x32", tile4x32AVX512}, {16, "4x16", tile4x16AVX512},
		},
		gemmTail:  gemmPortable,
		expAffine: vecExpAffine(16, expAffineAVX512),
		axpy:      vecAxpy(16, axpyAVX512),
		scaleCopy: vecScaleCopy(16, scaleCopyAVX512),
		mulScaled: vecMulScaled(16, mulScaledAVX512),
		triInvAcc: vecTriInvAcc(triInvAcc64AVX512),
		recWidths: []int{32, 16},
		recBlock:  asmRecBlock(16, recBlock32AVX512, recBlock16AVX512),
		vecName:   "avx512",
	}
	avx2Kernels = &kernels{
		level: cpu.AVX2,
		tiles: []gemmTile{
			{24, "4x24", tile4x24AVX2}, {16, "4x16", tile4x16AVX2}, {8, "4x8", tile4x8AVX2},
		},
		gemmTail:  gemmPortable,
		expAffine: vecExpAffine(8, expAffineAVX2),
		axpy:      vecAxpy(8, axpyAVX2),
		scaleCopy: vecScaleCopy(8, scaleCopyAVX2),
		mulScaled: vecMulScaled(8, mulScaledAVX2),
		triInvAcc: vecTriInvAcc(triInvAcc64AVX2),
		recWidths: []int{16, 8},
		recBlock:  asmRecBlock(8, recBlock16AVX2, recBlock8AVX2),
		vecName:   "avx2",
	}
)

// levelKernels returns the set for level l.
func levelKernels(l cpu.Level) *kernels {
	switch l {
	case cpu.AVX512:
		return avx512Kernels
	case cpu.AVX2:
		return avx2Kernels
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

// gemm tiles (tiles_amd64.s).

//go:noescape
func tile4x64AVX512(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func tile4x32AVX512(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func tile4x16AVX512(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func tile4x24AVX2(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func tile4x16AVX2(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

//go:noescape
func tile4x8AVX2(kk int, a *float32, lda, aks int, b *float32, ldb int, c *float32, ldc int, al *[4]float32, beta float32)

// Vector helpers (tiles_amd64.s); n is a multiple of the lanes, > 0.

//go:noescape
func axpyAVX512(y *float32, a float32, x *float32, n int)

//go:noescape
func axpyAVX2(y *float32, a float32, x *float32, n int)

//go:noescape
func scaleCopyAVX512(dst, src *float32, a float32, n int)

//go:noescape
func scaleCopyAVX2(dst, src *float32, a float32, n int)

//go:noescape
func mulScaledAVX512(dst, x, y *float32, a float32, n int)

//go:noescape
func mulScaledAVX2(dst, x, y *float32, a float32, n int)

//go:noescape
func expAffineAVX512(dst *float32, src *float64, a, b float64, n int)

//go:noescape
func expAffineAVX2(dst *float32, src *float64, a, b float64, n int)

//go:noescape
func triInvAcc64AVX512(dst, tm, nr *float32, ldt, cnt int)

//go:noescape
func triInvAcc64AVX2(dst, tm, nr *float32, ldt, cnt int)
