package gateddelta

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/qwenref/qwenref/tensor"
	"github.com/stretchr/testify/require"
)

// TestChunkedMatchesNaive sweeps the shapes that exercise every path:
// T = 1 (decode), below/at/above one chunk, many chunks with a ragged
// tail; every chunk size; GQA ratio 1 and 3; d_k ≠ d_v with widths that
// hit the 32-wide SIMD blocks, the 16-wide ones and scalar tails; with and
// without an initial state (and the final state checked in both). The
// Recurrent kernel is checked on the same inputs.
func TestChunkedMatchesNaive(t *testing.T) {
	lengths := []int{1, 63, 64, 65}
	if !testing.Short() {
		lengths = append(lengths, 1000)
	}
	shapes := []Dims{
		{NK: 2, NV: 2, DK: 48, DV: 80}, // GQA 1; DV = 32+32+16
		{NK: 1, NV: 3, DK: 40, DV: 24}, // GQA 3; odd widths → scalar tails
	}
	worst := map[string]float64{}
	for _, T := range lengths {
		for si, shape := range shapes {
			for _, withState := range []bool{false, true} {
				d := shape
				d.T = T
				in := newInputs(uint64(T*10+si), d, withState)
				outN, stN := in.run(t, Naive{})
				kernels := map[string]Kernel{"recurrent": Recurrent{}}
				for _, cs := range []int{16, 32, 64, 128} {
					kernels[fmt.Sprintf("chunked%d", cs)] = Chunked{ChunkSize: cs}
				}
				for name, kern := range kernels {
					t.Run(fmt.Sprintf("T%d/shape%d/state=%v/%s", T, si, withState, name), func(t *testing.T) {
						out, st := in.run(t, kern)
						eo, es := tensor.RelL2(out, outN), tensor.RelL2(st, stN)
						worst[name] = max(worst[name], eo, es)
						require.LessOrEqual(t, eo, tol32, "outputs")
						require.LessOrEqual(t, es, tol32, "final state")
					})
				}
			}
		}
	}
	t.Logf("worst relative L2 vs naive (outputs or state): %v", worst)
}

// TestChunkedMatchesFloat64 measures each float32 kernel's own error at
// the 27B head size (128×128 state) over several chunks and a ragged tail.
func TestChunkedMatchesFloat64(t *testing.T) {
	T := 200
	if testing.Short() {
		T = 70
	}
	d := Dims{T: T, NK: 1, NV: 3, DK: 128, DV: 128}
	in := newInputs(7, d, true)
	out64, st64 := in.reference64()
	for _, kern := range []Kernel{Naive{}, Recurrent{}, Chunked{}, Chunked{ChunkSize: 16}, Chunked{ChunkSize: 128}} {
		out, st := in.run(t, kern)
		eo, es := tensor.RelL2(out, out64), tensor.RelL2(st, st64)
		t.Logf("%T%+v vs float64: out %.2e state %.2e", kern, kern, eo, es)
		require.LessOrEqual(t, eo, tol32)
		require.LessOrEqual(t, es, tol32)
	}
}

// TestChunkedExtremeDecay covers the decay corner cases: exact zeros
// (α = 1), very strong decay that underflows α to 0, and long runs of
// moderate decay that push the fused recurrence's running scale past cMin
// so it has to rebase mid-sequence.
func TestChunkedExtremeDecay(t *testing.T) {
	for _, T := range []int{1, 127, 300} {
		d := Dims{T: T, NK: 1, NV: 2, DK: 32, DV: 32}
		in := newInputs(11, d, true)
		for i := range in.g {
			switch t := i / d.NV; {
			case t%50 == 7:
				in.g[i] = -1e4 // α underflows to 0: the state restarts
			case t%50 == 8:
				in.g[i] = 0 // α = 1
			case i%d.NV == 0:
				in.g[i] = -1.5 // 2⁻⁴⁰ is reached after ~19 tokens
			default:
				in.g[i] = -30 // every token crosses cMin by itself
			}
		}
		out64, st64 := in.reference64()
		outN, stN := in.run(t, Naive{})
		require.LessOrEqual(t, tensor.RelL2(outN, out64), tol32, "naive T=%d", T)
		require.LessOrEqual(t, tensor.RelL2(stN, st64), tol32, "naive T=%d", T)
		for _, kern := range []Kernel{Recurrent{}, Chunked{ChunkSize: 16}, Chunked{ChunkSize: 128}} {
			out, st := in.run(t, kern)
			require.LessOrEqual(t, tensor.RelL2(out, out64), tol32, "%+v T=%d out", kern, T)
			require.LessOrEqual(t, tensor.RelL2(st, st64), tol32, "%+v T=%d state", kern, T)
		}
	}
}

// TestChunkedContinuation checks that splitting a sequence into calls
// (prefill, then decode steps, then another multi-token call) gives the
// same outputs and state as one call: the state round-trips exactly in
// the layout the layer caches.
func TestChunkedContinuation(t *testing.T) {
	d := Dims{T: 150, NK: 2, NV: 6, DK: 32, DV: 48}
	in := newInputs(5, d, true)
	wantOut, wantSt := in.run(t, Naive{})
	for _, kern := range []Kernel{Chunked{}, Recurrent{}} {
		state := append([]float32(nil), in.state...)
		out := make([]float32, len(wantOut))
		qk, vv, gv := d.NK*d.DK, d.NV*d.DV, d.NV
		for _, span := range [][2]int{{0, 70}, {70, 71}, {71, 72}, {72, 150}} {
			a, b := span[0], span[1]
			ds := d
			ds.T = b - a
			require.NoError(t, kern.Forward(out[a*vv:b*vv], in.q[a*qk:b*qk], in.k[a*qk:b*qk],
				in.v[a*vv:b*vv], in.g[a*gv:b*gv], in.beta[a*gv:b*gv], ds, state))
		}
		require.LessOrEqual(t, tensor.RelL2(out, wantOut), tol32)
		require.LessOrEqual(t, tensor.RelL2(state, wantSt), tol32)
	}
}

// TestExpAffine checks the vector exp used for the decay factors against
// math.Exp over the whole range the kernels feed it: relative error within
// 4 float32 ulps (the Cephes-style polynomial reaches ~1–2, and rounding
// the exponent to float32 adds ≤ 6e-8·|x| relative, so below x ≈ −8 the
// bound widens accordingly), a finite value at +∞-bound inputs and a
// negligible one (≤ 1e-37) far below the float32 range.
func TestExpAffine(t *testing.T) {
	src := make([]float64, 0, 4096)
	for x := -87.0; x <= 1; x += 0.0223 {
		src = append(src, x)
	}
	dst := make([]float32, len(src))
	active.expAffine(dst, src, 0, 1)
	for i, x := range src {
		tol := 4*0x1p-24 + 0x1p-24*math.Abs(x)
		require.InEpsilon(t, math.Exp(x), float64(dst[i]), tol, "x=%v", x)
	}
	// a + b·src in float64: e^{(−600.5) − (−600)} must be e^{−0.5} to
	// float32 accuracy, which a float32 difference could not deliver.
	active.expAffine(dst[:16], []float64{-600, -600, -600, -600, -600, -600, -600, -600, -600, -600, -600, -600, -600, -600, -600, -600}, -600.5, -1)
	require.InEpsilon(t, math.Exp(-0.5), float64(dst[0]), 4*0x1p-24)
	big := []float64{500, -500, math.Inf(-1), -90, -88, -87.5}
	active.expAffine(dst[:len(big)], big, 0, 1)
	require.False(t, math.IsInf(float64(dst[0]), 0) || math.IsNaN(float64(dst[0])))
	for i := 1; i < len(big); i++ {
		require.LessOrEqual(t, dst[i], float32(1e-37), "x=%v", big[i])
	}
}

// TestKernelsIndependentOfGOMAXPROCS checks that how the work is split
// (by key-head group when there are at least as many key heads as cores,
// else by value head, and by value head for decode) does not change a
// single bit: every head's arithmetic is the same whichever way it runs.
func TestKernelsIndependentOfGOMAXPROCS(t *testing.T) {
	d := Dims{T: 100, NK: 2, NV: 6, DK: 32, DV: 32}
	in := newInputs(13, d, true)
	decode := in.prefix(1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, kern := range []Kernel{Chunked{}, Recurrent{}} {
		var wantOut, wantSt, wantDec []float32
		for _, procs := range []int{1, 2, 3} {
			runtime.GOMAXPROCS(procs)
			out, st := in.run(t, kern)
			dec, _ := decode.run(t, kern)
			if wantOut == nil {
				wantOut, wantSt, wantDec = out, st, dec
				continue
			}
			require.Equal(t, wantOut, out, "%T GOMAXPROCS=%d", kern, procs)
			require.Equal(t, wantSt, st, "%T GOMAXPROCS=%d", kern, procs)
			require.Equal(t, wantDec, dec, "%T GOMAXPROCS=%d decode", kern, procs)
		}
	}
}
