package gateddelta_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
	"github.com/stretchr/testify/require"
)

// tol32 is the agreement we demand between float32 implementations and
// from each of them to the float64 recurrence: relative L2 1e-5. Observed
// errors are 1e-7–1e-6 (float32 has 6e-8 unit roundoff and the state
// accumulates a few hundred roundings per entry), so a wrong mask, decay
// or transpose, which gives errors of order 1e-2 or more, cannot pass.
const tol32 = 1e-5

// newInputs draws a problem obeying the core's contract (reference owns
// the rules); withState draws a non-zero initial state.
func newInputs(t testing.TB, seed uint64, d gateddelta.Dims, withState bool) *reference.GDNInputs {
	t.Helper()
	in, err := reference.NewGDNInputs(seed, d, reference.GDNOptions{WithState: withState})
	require.NoError(t, err)
	return in
}

// run applies a kernel to a copy of the initial state.
func run(t testing.TB, in *reference.GDNInputs, k gateddelta.Kernel) (out, state []float32) {
	t.Helper()
	out, state, err := in.Run(k)
	require.NoError(t, err)
	return out, state
}

// exact is the float64 recurrence's outputs and final state, rounded to
// float32 for comparison.
func exact(t testing.TB, in *reference.GDNInputs) (out, state []float32) {
	t.Helper()
	o, s, err := in.Reference()
	require.NoError(t, err)
	return reference.Narrow(o), reference.Narrow(s)
}

// eachLevel runs f once per kernel level this CPU has, with Chunked and
// Recurrent using that level's inner loops.
func eachLevel(t *testing.T, f func(t *testing.T)) {
	for _, l := range gateddelta.Levels() {
		t.Run(l.String(), func(t *testing.T) {
			defer gateddelta.UseLevel(l)()
			f(t)
		})
	}
}

// fastKernels are the named variants the model can select.
func fastKernels() map[string]gateddelta.Kernel {
	ks := map[string]gateddelta.Kernel{"recurrent": gateddelta.Recurrent{}}
	for _, cs := range []int{16, 32, 64, 128} {
		ks[fmt.Sprintf("chunked%d", cs)] = gateddelta.Chunked{ChunkSize: cs}
	}
	return ks
}

func TestNaiveMatchesFloat64(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         gateddelta.Dims
		withState bool
	}{
		{"T1", gateddelta.Dims{T: 1, NK: 1, NV: 1, DK: 8, DV: 8}, true},
		{"gqa3", gateddelta.Dims{T: 40, NK: 2, NV: 6, DK: 16, DV: 24}, false},
		{"gqa3-state", gateddelta.Dims{T: 40, NK: 2, NV: 6, DK: 16, DV: 24}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInputs(t, 1, tc.d, tc.withState)
			out, st := run(t, in, gateddelta.Naive{})
			out64, st64 := exact(t, in)
			eo, es := tensor.RelL2(out, out64), tensor.RelL2(st, st64)
			t.Logf("naive vs float64: out %.2e state %.2e", eo, es)
			require.LessOrEqual(t, eo, tol32)
			require.LessOrEqual(t, es, tol32)
		})
	}
}

// TestKernelsHandComputed checks one token against arithmetic done by
// hand, so the reference itself is not only checked against another copy
// of the same recurrence.
func TestKernelsHandComputed(t *testing.T) {
	// DK = DV = 2, S0 = [[1,0],[0,2]], k̂ = (1,0), q̂ = (0,1), v = (3,4),
	// g = ln ½ so α = ½, β = ½.
	// S′ = [[½,0],[0,1]]; S′ᵀk̂ = (½,0); δ = ½((3,4) − (½,0)) = (1.25, 2);
	// S = S′ + k̂δᵀ = [[1.75,2],[0,1]]; o = Sᵀq̂ = (0,1).
	d := gateddelta.Dims{T: 1, NK: 1, NV: 1, DK: 2, DV: 2}
	g := []float32{float32(math.Log(0.5))}
	eachLevel(t, func(t *testing.T) {
		for _, kern := range []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Chunked{}, gateddelta.Recurrent{}} {
			st := []float32{1, 0, 0, 2}
			out := make([]float32, 2)
			require.NoError(t, kern.Forward(out, []float32{0, 1}, []float32{1, 0}, []float32{3, 4}, g, []float32{0.5}, d, st))
			require.InDeltaSlice(t, []float32{0, 1}, out, 1e-6)
			require.InDeltaSlice(t, []float32{1.75, 2, 0, 1}, st, 1e-6)
		}
	})
}

// TestKernelsMatchNaive sweeps, at every kernel level, the shapes that
// exercise every path: T = 1 (decode), below/at/above one chunk, many
// chunks with a ragged tail; every chunk size; GQA ratio 1 and 3; d_k ≠
// d_v with widths that hit the wide and narrow vector blocks and scalar
// tails; with and without an initial state (the final state checked in
// both).
func TestKernelsMatchNaive(t *testing.T) {
	lengths := []int{1, 63, 64, 65}
	if !testing.Short() {
		lengths = append(lengths, 1000)
	}
	shapes := []gateddelta.Dims{
		{NK: 2, NV: 2, DK: 48, DV: 80},   // GQA 1; DV = 64+16 (avx512), 5×16 (avx2)
		{NK: 1, NV: 3, DK: 40, DV: 24},   // GQA 3; DV = 16+8: narrow blocks, avx512 tail
		{NK: 2, NV: 6, DK: 37, DV: 45},   // odd widths → scalar tails everywhere
		{NK: 1, NV: 3, DK: 128, DV: 128}, // the model's heads
	}
	eachLevel(t, func(t *testing.T) {
		worst := map[string]float64{}
		for _, T := range lengths {
			for si, shape := range shapes {
				if shape.DK == 128 && (T > 65 || testing.Short() && T > 1) {
					continue
				}
				for _, withState := range []bool{false, true} {
					d := shape
					d.T = T
					in := newInputs(t, uint64(T*10+si), d, withState)
					outN, stN := run(t, in, gateddelta.Naive{})
					for name, kern := range fastKernels() {
						out, st := run(t, in, kern)
						eo, es := tensor.RelL2(out, outN), tensor.RelL2(st, stN)
						worst[name] = max(worst[name], eo, es)
						require.LessOrEqual(t, eo, tol32, "%s T=%d shape %d state=%v: outputs", name, T, si, withState)
						require.LessOrEqual(t, es, tol32, "%s T=%d shape %d state=%v: final state", name, T, si, withState)
					}
				}
			}
		}
		t.Logf("worst relative L2 vs naive (outputs or state): %v", worst)
	})
}

// TestKernelsMatchFloat64 measures each float32 kernel's own error at the
// model's head size (128×128 state) over several chunks and a ragged tail.
func TestKernelsMatchFloat64(t *testing.T) {
	T := 200
	if testing.Short() {
		T = 70
	}
	in := newInputs(t, 7, gateddelta.Dims{T: T, NK: 1, NV: 3, DK: 128, DV: 128}, true)
	out64, st64 := exact(t, in)
	eachLevel(t, func(t *testing.T) {
		for _, kern := range []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Recurrent{}, gateddelta.Chunked{}, gateddelta.Chunked{ChunkSize: 16}, gateddelta.Chunked{ChunkSize: 128}} {
			out, st := run(t, in, kern)
			eo, es := tensor.RelL2(out, out64), tensor.RelL2(st, st64)
			t.Logf("%T%+v vs float64: out %.2e state %.2e", kern, kern, eo, es)
			require.LessOrEqual(t, eo, tol32)
			require.LessOrEqual(t, es, tol32)
		}
	})
}

// TestKernelsExtremeDecay covers the decay corner cases: exact zeros
// (α = 1), very strong decay that underflows α to 0, and long runs of
// moderate decay that push the fused recurrence's running scale past 2⁻⁴⁰
// so it has to rebase mid-sequence.
func TestKernelsExtremeDecay(t *testing.T) {
	eachLevel(t, func(t *testing.T) {
		for _, T := range []int{1, 127, 300} {
			d := gateddelta.Dims{T: T, NK: 1, NV: 2, DK: 32, DV: 32}
			in := newInputs(t, 11, d, true)
			for i := range in.G {
				switch t := i / d.NV; {
				case t%50 == 7:
					in.G[i] = -1e4 // α underflows to 0: the state restarts
				case t%50 == 8:
					in.G[i] = 0 // α = 1
				case i%d.NV == 0:
					in.G[i] = -1.5 // 2⁻⁴⁰ is reached after ~19 tokens
				default:
					in.G[i] = -30 // every token crosses 2⁻⁴⁰ by itself
				}
			}
			out64, st64 := exact(t, in)
			for _, kern := range []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Recurrent{}, gateddelta.Chunked{ChunkSize: 16}, gateddelta.Chunked{ChunkSize: 128}} {
				out, st := run(t, in, kern)
				require.LessOrEqual(t, tensor.RelL2(out, out64), tol32, "%+v T=%d out", kern, T)
				require.LessOrEqual(t, tensor.RelL2(st, st64), tol32, "%+v T=%d state", kern, T)
			}
		}
	})
}

// TestKernelsContinuation checks that splitting a sequence into calls
// (prefill, then decode steps, then another multi-token call) gives the
// same outputs and state as one call: the state round-trips exactly in
// the layout the layer caches.
func TestKernelsContinuation(t *testing.T) {
	d := gateddelta.Dims{T: 150, NK: 2, NV: 6, DK: 32, DV: 48}
	in := newInputs(t, 5, d, true)
	wantOut, wantSt := run(t, in, gateddelta.Naive{})
	eachLevel(t, func(t *testing.T) {
		for _, kern := range []gateddelta.Kernel{gateddelta.Chunked{}, gateddelta.Recurrent{}} {
			state := append([]float32(nil), in.State...)
			out := make([]float32, len(wantOut))
			qk, vv, gv := d.NK*d.DK, d.NV*d.DV, d.NV
			for _, span := range [][2]int{{0, 70}, {70, 71}, {71, 72}, {72, 150}} {
				a, b := span[0], span[1]
				ds := d
				ds.T = b - a
				require.NoError(t, kern.Forward(out[a*vv:b*vv], in.Q[a*qk:b*qk], in.K[a*qk:b*qk],
					in.V[a*vv:b*vv], in.G[a*gv:b*gv], in.Beta[a*gv:b*gv], ds, state))
			}
			require.LessOrEqual(t, tensor.RelL2(out, wantOut), tol32)
			require.LessOrEqual(t, tensor.RelL2(state, wantSt), tol32)
		}
	})
}

// TestKernelsIndependentOfGOMAXPROCS checks that how the work is split
// (by key-head group with two key heads or more per core, else by value
// head, and then by blocks of the state's value columns; by value head for
// decode) does not change a single bit: every head's and column's
// arithmetic is the same whichever way it runs. DV = 80 and 128 reach the
// column blocks (80 in a ragged pair of 48 and 32), T = 100 a whole chunk
// and a recurrent tail.
func TestKernelsIndependentOfGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, dv := range []int{32, 80, 128} {
		d := gateddelta.Dims{T: 100, NK: 2, NV: 6, DK: 32, DV: dv}
		in := newInputs(t, 13, d, true)
		d.T = 1
		dec := newInputs(t, 14, d, true)
		for _, kern := range []gateddelta.Kernel{gateddelta.Chunked{}, gateddelta.Recurrent{}} {
			var wantOut, wantSt, wantDec []float32
			for _, procs := range []int{1, 2, 3, 16} {
				runtime.GOMAXPROCS(procs)
				out, st := run(t, in, kern)
				o1, _ := run(t, dec, kern)
				if wantOut == nil {
					wantOut, wantSt, wantDec = out, st, o1
					continue
				}
				require.Equal(t, wantOut, out, "%T DV=%d GOMAXPROCS=%d", kern, dv, procs)
				require.Equal(t, wantSt, st, "%T DV=%d GOMAXPROCS=%d", kern, dv, procs)
				require.Equal(t, wantDec, o1, "%T DV=%d GOMAXPROCS=%d decode", kern, dv, procs)
			}
		}
	}
}

func TestKernelsRejectBadInput(t *testing.T) {
	good := gateddelta.Dims{T: 3, NK: 2, NV: 4, DK: 4, DV: 5}
	in := newInputs(t, 3, good, false)
	out := make([]float32, good.T*good.NV*good.DV)
	for _, kern := range []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Recurrent{}, gateddelta.Chunked{}, gateddelta.Chunked{ChunkSize: 16}} {
		// Each case breaks exactly one thing.
		require.Error(t, kern.Forward(out[1:], in.Q, in.K, in.V, in.G, in.Beta, good, in.State), "short out")
		require.Error(t, kern.Forward(out, in.Q[1:], in.K, in.V, in.G, in.Beta, good, in.State), "short q")
		require.Error(t, kern.Forward(out, in.Q, in.K[1:], in.V, in.G, in.Beta, good, in.State), "short k")
		require.Error(t, kern.Forward(out, in.Q, in.K, in.V[1:], in.G, in.Beta, good, in.State), "short v")
		require.Error(t, kern.Forward(out, in.Q, in.K, in.V, in.G[1:], in.Beta, good, in.State), "short g")
		require.Error(t, kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta[1:], good, in.State), "short beta")
		require.Error(t, kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, good, in.State[1:]), "short state")
		bad := good
		bad.NV = 3 // not a multiple of NK
		require.Error(t, kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, bad, in.State), "NV%NK")
		bad = good
		bad.DK = 0
		require.Error(t, kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, bad, in.State), "DK=0")
		bad = good
		bad.T = math.MaxInt / 2 // T·NK·DK would wrap around
		require.ErrorContains(t, kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, bad, in.State), "exceed", "huge T")
		require.NoError(t, kern.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, good, append([]float32(nil), in.State...)))
	}
	for _, cs := range []int{-64, 1, 48, 256} {
		err := gateddelta.Chunked{ChunkSize: cs}.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, good, in.State)
		require.Error(t, err, "chunk size %d", cs)
	}
}

func TestZeroTokensLeaveStateAlone(t *testing.T) {
	d := gateddelta.Dims{T: 0, NK: 1, NV: 2, DK: 4, DV: 4}
	state := make([]float32, 2*4*4)
	for i := range state {
		state[i] = float32(i)
	}
	want := append([]float32(nil), state...)
	for _, kern := range []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Chunked{}, gateddelta.Recurrent{}} {
		require.NoError(t, kern.Forward(nil, nil, nil, nil, nil, nil, d, state))
		require.Equal(t, want, state)
	}
}

// TestKernelInfoNamesSelectedLevel checks that the kernels in use are the
// selected level's (level_test.go checks QWENREF_CPU picks that level).
func TestKernelInfoNamesSelectedLevel(t *testing.T) {
	info := gateddelta.KernelInfo()
	require.Regexp(t, "^"+cpu.Selected().String()+": ", info)
	for _, l := range gateddelta.Levels() {
		restore := gateddelta.UseLevel(l)
		require.Regexp(t, "^"+l.String()+": ", gateddelta.KernelInfo())
		restore()
	}
}
