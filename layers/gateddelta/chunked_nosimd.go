//go:build !goexperiment.simd

package gateddelta

// Without GOEXPERIMENT=simd every kernel is the portable one.

// simdEnabled reports whether the archsimd kernels are in use.
const simdEnabled = false

func gemm(m, n, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, tri triMode, rs []float32) {
	gemmGeneric(m, n, k, alpha, a, lda, aks, b, ldb, beta, c, ldc, tri, rs)
}

func expAffine(dst []float32, src []float64, a, b float64) { expAffineGeneric(dst, src, a, b) }

func axpy(y []float32, a float32, x []float32) { axpyGeneric(y, a, x) }

func scaleCopy(dst, src []float32, a float32) { scaleCopyGeneric(dst, src, a) }

func mulScaled(dst, x, y []float32, a float32) { mulScaledGeneric(dst, x, y, a) }

func recBlockWidth(rem int) int { return min(rem, 32) }

func recBlock(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	recBlockGeneric(s, lds, w, dk, q, k, ldqk, v, out, ldv, sc, n)
}

func triInvAcc(dst, tm, nr []float32, n, j0, r int) { triInvAccGeneric(dst, tm, nr, n, j0, r) }
