package vecmath

import "github.com/qwenref/qwenref/internal/cpu"

func init() { use(cpu.Selected()) }

// kernelsFor returns the slice kernels of a level this build has.
func kernelsFor(l cpu.Level) kernels {
	if l == cpu.NEON {
		return neon
	}
	return portable
}

var neon = kernels{
	name:       "neon",
	exp:        unary(expNEON, 4, expPortable),
	silu:       unary(siluNEON, 4, siluPortable),
	sigmoid:    unary(sigmoidNEON, 4, sigmoidPortable),
	siluMul:    binary(siluMulNEON, 4, siluMulPortable),
	mulSigmoid: binary(mulSigmoidNEON, 4, mulSigmoidPortable),
	sumSquares: reduce(sumSquaresNEON, 4),
}

//go:noescape
func expNEON(dst, x *float32, n int)

//go:noescape
func siluNEON(dst, x *float32, n int)

//go:noescape
func sigmoidNEON(dst, x *float32, n int)

//go:noescape
func siluMulNEON(dst, x, y *float32, n int)

//go:noescape
func mulSigmoidNEON(dst, x, y *float32, n int)

//go:noescape
func sumSquaresNEON(x *float32, n int) float64
