//go:build amd64 || arm64

package gateddelta

import "github.com/qwenref/qwenref/internal/cpu"

// The assembly binding: tiles_<arch>.s and recurrent_<arch>.s hold the
// kernels, tiles_<arch>_gen.go and recurrent_<arch>_gen.go their
// declarations and the table asmLevels, all written by internal/kernelgen.
// AVX-512 runs 4×64 GEMM tiles (16 accumulators, four B vectors and four
// broadcasts of A per step); AVX2, with 16 vector registers, 4×24; NEON
// 4×16 (16 accumulators of 4 lanes).

// asmLevel is one level's assembly kernels, as the generated table lists
// them. The vector helpers take whole vectors of lanes values.
type asmLevel struct {
	level cpu.Level
	name  string
	lanes int
	tiles []gemmTile
	// expAffine is e^(a + b·src) rounded to float32; a level without it
	// (NEON) has exp, e^x in place, and Go forms the exponents.
	expAffine   func(dst *float32, src *float64, a, b float64, n int)
	exp         func(x *float32, n int)
	axpy        func(y *float32, a float32, x *float32, n int)
	scaleCopy   func(dst, src *float32, a float32, n int)
	mulScaled   func(dst, x, y *float32, a float32, n int)
	triInvAcc64 func(dst, tm, nr *float32, ldt, cnt int)
	// recWidth is the narrow recurrence block's width; recWide runs twice it.
	recWidth           int
	recWide, recNarrow recBlockAsm
}

func init() {
	for _, a := range asmLevels {
		expAffine := expAffineVia(a.lanes, a.exp)
		if a.expAffine != nil {
			expAffine = vecExpAffine(a.lanes, a.expAffine)
		}
		asmKernels = append(asmKernels, &kernels{
			level:     a.level,
			tiles:     a.tiles,
			gemmTail:  gemmPortable,
			expAffine: expAffine,
			axpy:      vecAxpy(a.lanes, a.axpy),
			scaleCopy: vecScaleCopy(a.lanes, a.scaleCopy),
			mulScaled: vecMulScaled(a.lanes, a.mulScaled),
			triInvAcc: vecTriInvAcc(a.triInvAcc64),
			recWidths: []int{2 * a.recWidth, a.recWidth},
			recBlock:  asmRecBlock(a.recWidth, a.recWide, a.recNarrow),
			vecName:   a.name,
		})
	}
	active = levelKernels(cpu.Selected())
}

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

// expAffineVia forms the exponents a + b·src in float64 in Go (NEON's
// float64 lanes are only two wide, and rounding each to float32 is what
// the amd64 kernels do too), bounds them above by expClamp so every result
// is finite, as on amd64, then runs the vector exp over them in place.
func expAffineVia(lanes int, exp func(x *float32, n int)) func([]float32, []float64, float64, float64) {
	return func(dst []float32, src []float64, a, b float64) {
		src = src[:len(dst)]
		n := len(dst) &^ (lanes - 1)
		for i := range dst[:n] {
			dst[i] = float32(min(a+b*src[i], expClamp))
		}
		if n > 0 {
			exp(&dst[0], n)
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
