//go:build amd64 || arm64

package gateddelta

// The wrappers below check the slices once and hand the assembly whole
// vectors; the remainder (never at the model's shapes) runs in Go.

func vecExpAffine(lanes int, f func(dst *float32, src *float64, a, b float64, n int)) func([]float32, []float64, float64, float64) {
	return func(dst []float32, src []float64, a, b float64) {
		n := len(dst) &^ (lanes - 1)
		if n > 0 {
			_ = src[n-1]
			f(&dst[0], &src[0], a, b, n)
		}
		expAffinePortable(dst[n:], src[n:], a, b)
	}
}

func vecAxpy(lanes int, f func(y *float32, a float32, x *float32, n int)) func([]float32, float32, []float32) {
	return func(y []float32, a float32, x []float32) {
		n := len(y) &^ (lanes - 1)
		if n > 0 {
			_ = x[n-1]
			f(&y[0], a, &x[0], n)
		}
		axpyPortable(y[n:], a, x[n:])
	}
}

func vecScaleCopy(lanes int, f func(dst, src *float32, a float32, n int)) func([]float32, []float32, float32) {
	return func(dst, src []float32, a float32) {
		n := len(dst) &^ (lanes - 1)
		if n > 0 {
			_ = src[n-1]
			f(&dst[0], &src[0], a, n)
		}
		scaleCopyPortable(dst[n:], src[n:], a)
	}
}

func vecMulScaled(lanes int, f func(dst, x, y *float32, a float32, n int)) func([]float32, []float32, []float32, float32) {
	return func(dst, x, y []float32, a float32) {
		n := len(dst) &^ (lanes - 1)
		if n > 0 {
			_, _ = x[n-1], y[n-1]
			f(&dst[0], &x[0], &y[0], a, n)
		}
		mulScaledPortable(dst[n:], x[n:], y[n:], a)
	}
}

// vecTriInvAcc runs the 64-column forward-substitution update in assembly
// (the chunk step asks for 64 columns except at C = 16 and 32).
func vecTriInvAcc(f func(dst, tm, nr *float32, ldt, cnt int)) func(dst, tm, nr []float32, n, j0, r int) {
	return func(dst, tm, nr []float32, n, j0, r int) {
		if len(dst) != 64 || r <= j0 {
			triInvAccPortable(dst, tm, nr, n, j0, r)
			return
		}
		_ = tm[(r-1)*n+j0+63]
		_ = nr[r-1]
		f(&dst[0], &tm[j0*n+j0], &nr[j0], n, r-j0)
	}
}
