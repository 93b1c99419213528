package vecmath

import "github.com/qwenref/qwenref/internal/cpu"

func init() { use(cpu.Selected()) }

// kernelsFor returns the slice kernels of a level this build has.
func kernelsFor(l cpu.Level) kernels {
	switch l {
	case cpu.AVX512:
		return avx512
	case cpu.AVX2:
		return avx2
	}
	return portable
}

var avx512 = kernels{
	name:       "avx512",
	exp:        unary(expAVX512, 16, expPortable),
	silu:       unary(siluAVX512, 16, siluPortable),
	sigmoid:    unary(sigmoidAVX512, 16, sigmoidPortable),
	siluMul:    binary(siluMulAVX512, 16, siluMulPortable),
	mulSigmoid: binary(mulSigmoidAVX512, 16, mulSigmoidPortable),
	sumSquares: reduce(sumSquaresAVX512, 16),
}

var avx2 = kernels{
	name:       "avx2",
	exp:        unary(expAVX2, 8, expPortable),
	silu:       unary(siluAVX2, 8, siluPortable),
	sigmoid:    unary(sigmoidAVX2, 8, sigmoidPortable),
	siluMul:    binary(siluMulAVX2, 8, siluMulPortable),
	mulSigmoid: binary(mulSigmoidAVX2, 8, mulSigmoidPortable),
	sumSquares: reduce(sumSquaresAVX2, 8),
}

//go:noescape
func expAVX512(dst, x *float32, n int)

//go:noescape
func siluAVX512(dst, x *float32, n int)

//go:noescape
func sigmoidAVX512(dst, x *float32, n int)

//go:noescape
func siluMulAVX512(dst, x, y *float32, n int)

//go:noescape
func mulSigmoidAVX512(dst, x, y *float32, n int)

//go:noescape
func sumSquaresAVX512(x *float32, n int) float64

//go:noescape
func expAVX2(dst, x *float32, n int)

//go:noescape
func siluAVX2(dst, x *float32, n int)

//go:noescape
func sigmoidAVX2(dst, x *float32, n int)

//go:noescape
func siluMulAVX2(dst, x, y *float32, n int)

//go:noescape
func mulSigmoidAVX2(dst, x, y *float32, n int)

//go:noescape
func sumSquaresAVX2(x *float32, n int) float64
