// Package vecmath is the one float32 exponential of qwenref's CPU kernels,
// and the activations built on it (SiLU, sigmoid), in scalar and slice
// form. The slice forms run assembly chosen by internal/cpu: AVX-512 or
// AVX2 + FMA on amd64, NEON on arm64, and plain Go elsewhere or under
// QWENREF_CPU=portable.
//
// e^x is computed as 2^n·e^r with n = round(x·log2 e) and r = x − n·ln 2
// (ln 2 split in two so that n·Ln2Hi is exact), e^r from the Taylor
// polynomial of degree 7, whose first omitted term is below 5.3e-9 on
// |r| ≤ ln2/2. Error bounds, tested against math.Exp on every level:
//
//   - relative error ≤ 4e-7 (about 3.4 ulps) where the result is a normal
//     float32 (x ≥ −87.33);
//   - below ExpUnderflow the result is 0 (portable, AVX2, NEON) or a
//     subnormal (AVX-512); either way the absolute error is under 2^−126;
//   - above ExpOverflow (the largest x with e^x ≤ MaxFloat32) it is +Inf;
//     e^NaN is NaN, e^−Inf is 0.
//
// The same reduction and polynomial are emitted into the kernels of conv1d
// and attention by the generator helper in internal/vecmath/emit.
package vecmath

import (
	"math"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath/expconst"
)

// The assembly of every architecture is generated on any host.
//go:generate go run github.com/qwenref/qwenref/internal/kernelgen internal/vecmath

// The constants of the exponential (see internal/vecmath/expconst).
const (
	Log2E        = expconst.Log2E
	Ln2Hi        = expconst.Ln2Hi
	Ln2Lo        = expconst.Ln2Lo
	ExpUnderflow = expconst.Underflow // below: 0 (AVX-512: a subnormal)
	ExpOverflow  = expconst.Overflow  // above: +Inf
)

// ExpCoef are the Taylor coefficients 1/k! for k = 7 down to 1.
var ExpCoef = expconst.Coef

// roundMagic is 1.5·2^23: adding and subtracting it rounds a float32 of
// magnitude below 2^22 to the nearest integer, ties to even.
const roundMagic = 12582912

// Exp32 returns e^x in float32 within the bounds in the package comment.
func Exp32(x float32) float32 {
	if x >= ExpUnderflow && x <= ExpOverflow {
		return expReduced(x)
	}
	return expEdge(x)
}

// expEdge is Exp32 outside the reduction's range: +Inf, 0 or NaN.
func expEdge(x float32) float32 {
	switch {
	case x > ExpOverflow:
		return float32(math.Inf(1))
	case x < ExpUnderflow:
		return 0
	}
	return x // NaN
}

// expReduced is Exp32 for x in [ExpUnderflow, ExpOverflow].
func expReduced(x float32) float32 {
	n := float32(float32(x*Log2E)+roundMagic) - roundMagic
	r := x - n*Ln2Hi
	r -= n * float32(Ln2Lo)
	c := &ExpCoef // Horner, unrolled
	p := c[0]*r + c[1]
	p = p*r + c[2]
	p = p*r + c[3]
	p = p*r + c[4]
	p = p*r + c[5]
	p = p*r + c[6]
	p = p*r + 1
	// 2^n goes straight into the exponent field of p ∈ [0.7, 1.5]: exact
	// while the result is normal, which the range guarantees.
	return math.Float32frombits(math.Float32bits(p) + uint32(int32(n))<<23)
}

// SiLU32 returns u/(1+e^−u) with Exp32: u for large u, −0 for very
// negative u, NaN for u = −Inf (as PyTorch's u·σ(u)).
func SiLU32(u float32) float32 { return u / (1 + Exp32(-u)) }

// Sigmoid32 returns 1/(1+e^−x) with Exp32.
func Sigmoid32(x float32) float32 { return 1 / (1 + Exp32(-x)) }

// kernels is one level's slice kernels. Each handles any length; the
// assembly ones run the tail as one padded vector (vecmath_asm.go).
type kernels struct {
	level      cpu.Level
	name       string
	exp        func(dst, x []float32)
	silu       func(dst, x []float32)
	sigmoid    func(dst, x []float32)
	siluMul    func(dst, x, y []float32)
	mulSigmoid func(dst, x, g []float32)
	sumSquares func(x []float32) float64
}

// active is the level's kernels: portable, or on amd64 and arm64 the
// assembly of cpu.Selected(), chosen in vecmath_asm.go's init.
var active = portable

// asmKernels are the assembly levels of this build, which vecmath_asm.go
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

// use selects the kernels of a level (vecmath_asm.go's init calls it with
// cpu.Selected(); tests call it to run every level).
func use(l cpu.Level) { active = kernelsFor(l) }

// KernelInfo names the kernels the slice functions run, e.g. "vecmath:avx512".
func KernelInfo() string { return "vecmath:" + active.name }

// ExpInPlace replaces every x[i] with e^x[i].
func ExpInPlace(x []float32) { active.exp(x, x) }

// Exp sets dst[i] = e^x[i]; dst and x have the same length and may be the
// same slice.
func Exp(dst, x []float32) { active.exp(dst[:len(x)], x) }

// SiLU sets dst[i] = SiLU32(x[i]); dst and x may be the same slice.
func SiLU(dst, x []float32) { active.silu(dst[:len(x)], x) }

// Sigmoid sets dst[i] = Sigmoid32(x[i]); dst and x may be the same slice.
func Sigmoid(dst, x []float32) { active.sigmoid(dst[:len(x)], x) }

// SiLUMul sets dst[i] = SiLU32(x[i])·y[i], the gated MLP's and the gated
// norm's product; dst may be x or y. y must be as long as x.
func SiLUMul(dst, x, y []float32) { active.siluMul(dst[:len(x)], x, y[:len(x)]) }

// MulSigmoid sets dst[i] = x[i]·Sigmoid32(g[i]), the attention output gate;
// dst may be x or g. g must be as long as x.
func MulSigmoid(dst, x, g []float32) { active.mulSigmoid(dst[:len(x)], x, g[:len(x)]) }

// SumSquares returns Σ x[i]² accumulated in float64 (the norms' reduction).
func SumSquares(x []float32) float64 { return active.sumSquares(x) }
