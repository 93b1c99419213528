package vecmath

import "github.com/qwenref/qwenref/internal/cpu"

// The portable kernels: plain Go loops with the bounds checks hoisted. They
// are the whole of the portable level and the tails of the vector ones.
var portable = kernels{
	level: cpu.Portable, name: "portable", exp: expPortable, silu: siluPortable, sigmoid: sigmoidPortable,
	siluMul: siluMulPortable, mulSigmoid: mulSigmoidPortable, sumSquares: sumSquaresPortable,
}

func expPortable(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = Exp32(v)
	}
}

func siluPortable(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v / (1 + Exp32(-v))
	}
}

func sigmoidPortable(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = 1 / (1 + Exp32(-v))
	}
}

func siluMulPortable(dst, x, y []float32) {
	dst, y = dst[:len(x)], y[:len(x)]
	for i, v := range x {
		dst[i] = v / (1 + Exp32(-v)) * y[i]
	}
}

func mulSigmoidPortable(dst, x, g []float32) {
	dst, g = dst[:len(x)], g[:len(x)]
	for i, v := range x {
		dst[i] = v / (1 + Exp32(-g[i]))
	}
}

// sumSquaresPortable keeps four float64 partial sums, so the adds are not
// one serial chain.
func sumSquaresPortable(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0]) * float64(v[0])
		s1 += float64(v[1]) * float64(v[1])
		s2 += float64(v[2]) * float64(v[2])
		s3 += float64(v[3]) * float64(v[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}
