package vecmath

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/internal/vecmath/leveltest"
)

// Error bounds, as stated in the package comment (and derived there).
const (
	expRelTol = 4e-7 // Exp where e^x is a normal float32
	// actRelTol adds the division's half ulp and the (1+e) rounding to
	// Exp's error: SiLU and sigmoid.
	actRelTol = 6e-7
	// tinyAbs covers results that are zero or subnormal in float32 but not
	// in float64: e^x below ExpUnderflow (≤ 1.19e-38), and u·e^u for
	// u < −88.7, where e^−u overflows (≤ 88.8·e^−88.72 < 3e-37).
	tinyAbs = 3e-37
)

// eachLevel runs f at every kernel level this CPU has, then restores the
// selected one.
func eachLevel(t *testing.T, f func(t *testing.T)) {
	defer use(cpu.Selected())
	for _, l := range cpu.Supported() {
		use(l)
		t.Run(l.String(), f)
	}
}

// sweep returns float32 values over the whole range: every 4099th bit
// pattern (both signs, subnormals, Inf and NaN included; every 65521st
// under -short, for emulated runs) plus the edges and a fine grid over
// the range where e^x is finite.
func sweep() []float32 {
	var xs []float32
	stride := uint64(4099)
	if testing.Short() {
		stride = 65521
	}
	for b := uint64(0); b < 1<<32; b += stride {
		xs = append(xs, math.Float32frombits(uint32(b)))
	}
	for _, x := range []float64{0, -0.0, 1, -1, 0.5, ExpUnderflow, ExpOverflow, -87.3365, -88, -103.9, -104, -150,
		88.7228, 88.72284, 89, 100, math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat32, -math.MaxFloat32} {
		xs = append(xs, float32(x))
	}
	for x := -110.0; x <= 95; x += 0.0173 {
		xs = append(xs, float32(x))
	}
	return xs
}

// checkClose reports got against want (a float64 reference) within rel
// relative plus tinyAbs absolute error; infinities and NaN must match.
func checkClose(t *testing.T, what string, x float32, got float32, want, rel float64) bool {
	t.Helper()
	return checkCloseAbs(t, what, x, got, want, rel, tinyAbs)
}

// checkCloseAbs is checkClose with another absolute tolerance.
func checkCloseAbs(t *testing.T, what string, x float32, got float32, want, rel, abs float64) bool {
	t.Helper()
	g := float64(got)
	switch {
	case math.IsNaN(want):
		return assert.True(t, math.IsNaN(g), "%s(%g) = %g, want NaN", what, x, g)
	case math.IsInf(want, 0) || math.Abs(want) > math.MaxFloat32:
		return assert.True(t, math.IsInf(g, int(math.Copysign(1, want))), "%s(%g) = %g, want %g", what, x, g, want)
	}
	return assert.LessOrEqual(t, math.Abs(g-want), rel*math.Abs(want)+abs, "%s(%g) = %g, want %g", what, x, g, want)
}

func TestExpAgainstMathExp(t *testing.T) {
	xs := sweep()
	eachLevel(t, func(t *testing.T) {
		got := make([]float32, len(xs))
		Exp(got, xs)
		worst := 0.0
		for i, x := range xs {
			want := math.Exp(float64(x))
			if !checkClose(t, "Exp", x, got[i], want, expRelTol) {
				return
			}
			if x >= ExpUnderflow && want <= math.MaxFloat32 {
				worst = max(worst, math.Abs(float64(got[i])-want)/want)
			}
			if x < ExpUnderflow {
				require.GreaterOrEqual(t, got[i], float32(0), "Exp(%g)", x)
			}
		}
		t.Logf("worst relative error %.3g (%.2f ulps of 2^-24)", worst, worst/0x1p-24)
		// The scalar form agrees with the bound too.
		for _, x := range xs[:2000] {
			checkClose(t, "Exp32", x, Exp32(x), math.Exp(float64(x)), expRelTol)
		}
	})
}

func TestExpSpecialValues(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		// 17 values: a full vector at either width plus a tail.
		xs := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0, 89, -200, 88.72283, 1e30, -1e30,
			0, 0, 0, 0, 0, 0, 0, float32(math.NaN())}
		got := append([]float32(nil), xs...)
		ExpInPlace(got)
		assert.True(t, math.IsNaN(float64(got[0])), "e^NaN")
		assert.Equal(t, float32(0), got[1], "e^-Inf")
		assert.True(t, math.IsInf(float64(got[2]), 1), "e^+Inf")
		assert.Equal(t, float32(1), got[3], "e^0")
		assert.True(t, math.IsInf(float64(got[4]), 1), "e^89 overflows")
		assert.Equal(t, float32(0), got[5], "e^-200")
		assert.False(t, math.IsInf(float64(got[6]), 0), "e^88.72283 is finite")
		assert.True(t, math.IsInf(float64(got[7]), 1), "e^1e30")
		assert.Equal(t, float32(0), got[8], "e^-1e30")
		assert.True(t, math.IsNaN(float64(got[16])), "e^NaN in the tail")
	})
}

func silu64(u float64) float64 {
	if u < 0 {
		e := math.Exp(u)
		return u * e / (1 + e)
	}
	return u / (1 + math.Exp(-u))
}

func sigmoid64(x float64) float64 {
	if x < 0 {
		e := math.Exp(x)
		return e / (1 + e)
	}
	return 1 / (1 + math.Exp(-x))
}

func TestActivations(t *testing.T) {
	xs := sweep()
	ys := make([]float32, len(xs)) // second operand: values around 1 and sign changes
	for i := range ys {
		ys[i] = float32(math.Sin(float64(i))) * 3
	}
	eachLevel(t, func(t *testing.T) {
		out := make([]float32, len(xs))
		SiLU(out, xs)
		for i, x := range xs {
			want := silu64(float64(x))
			if math.IsInf(float64(x), -1) {
				want = math.NaN() // −Inf·σ(−Inf), as PyTorch
			}
			if !checkClose(t, "SiLU", x, out[i], want, actRelTol) {
				return
			}
		}
		Sigmoid(out, xs)
		for i, x := range xs {
			if !checkClose(t, "Sigmoid", x, out[i], sigmoid64(float64(x)), actRelTol) {
				return
			}
		}
		SiLUMul(out, xs, ys)
		for i, x := range xs {
			want := silu64(float64(x)) * float64(ys[i])
			if math.IsInf(float64(x), -1) {
				want = math.NaN()
			}
			// The product scales SiLU's absolute error by |y|.
			if !checkCloseAbs(t, "SiLUMul", x, out[i], want, actRelTol, tinyAbs*max(1, math.Abs(float64(ys[i])))) {
				return
			}
		}
		MulSigmoid(out, ys, xs)
		for i, x := range xs {
			if !checkClose(t, "MulSigmoid", x, out[i], float64(ys[i])*sigmoid64(float64(x)), actRelTol) {
				return
			}
		}
		// In place, with a length that leaves a tail at both widths.
		a := append([]float32(nil), xs[:37]...)
		SiLU(a, a)
		SiLU(out[:37], xs[:37])
		assert.Equal(t, out[:37], a, "in place")
	})
}

func TestSumSquares(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 100, 5120} {
			x := make([]float32, n)
			var want float64
			for i := range x {
				x[i] = float32(math.Cos(float64(i)*0.37)) * float32(i%13+1)
				want += float64(x[i]) * float64(x[i])
			}
			// Only the order of float64 adds differs: n·2^-53 relative.
			assert.InDelta(t, want, SumSquares(x), want*float64(n+1)*0x1p-53, "n=%d", n)
		}
	})
}

// TestSelectedKernels checks that the slice functions run the level
// internal/cpu selected; TestForcedLevel runs it under each QWENREF_CPU.
func TestSelectedKernels(t *testing.T) { leveltest.CheckSelected(t, "vecmath", KernelInfo()) }

func TestForcedLevel(t *testing.T) { leveltest.RunForced(t, "TestSelectedKernels") }

// An element's bits do not depend on how long the slice holding it is:
// the first n values of a call over 1000 equal a call over those n alone,
// at every level this CPU runs (a packed forward relies on it).
func TestElementsIndependentOfLength(t *testing.T) {
	x := make([]float32, 1000)
	for i := range x {
		x[i] = float32(i%97)/12 - 4
	}
	defer use(cpu.Selected())
	for _, l := range cpu.Supported() {
		use(l)
		full := map[string][]float32{}
		ops := map[string]func(dst, x []float32){
			"exp": Exp, "silu": SiLU, "sigmoid": Sigmoid,
			"silumul":    func(dst, x []float32) { SiLUMul(dst, x, x) },
			"mulsigmoid": func(dst, x []float32) { MulSigmoid(dst, x, x) },
		}
		for name, f := range ops {
			full[name] = make([]float32, len(x))
			f(full[name], x)
			for n := 1; n < 40; n++ {
				got := make([]float32, n)
				f(got, x[:n])
				require.Equal(t, full[name][:n], got, "%s at level %v over %d values", name, l, n)
			}
		}
	}
}

// The padded tail allocates nothing: these run per row in the hot loops.
func TestTailAllocatesNothing(t *testing.T) {
	x, dst := make([]float32, 37), make([]float32, 37)
	if n := testing.AllocsPerRun(100, func() { SiLU(dst, x); SiLUMul(dst, x, x) }); n != 0 {
		t.Errorf("%v allocations a call over a partial vector", n)
	}
}
