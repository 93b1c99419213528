package gateddelta

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qwenref/qwenref/tensor"
	"github.com/stretchr/testify/require"
)

// inputs is one random, realistic gated-delta-rule problem.
type inputs struct {
	d                Dims
	q, k, v, g, beta []float32
	state            []float32 // initial state (not modified by run)
}

// newInputs draws a problem the way the layer feeds the core: q̂ and k̂
// L2-normalised (eps 1e-6 on the sum) with q̂ scaled by DK^-1/2,
// g = −exp(a)·softplus(b) ≤ 0 with a per head so decay strengths vary
// over orders of magnitude, and β = σ(b′) ∈ (0,1). withState draws a
// non-zero initial state.
func newInputs(seed uint64, d Dims, withState bool) *inputs {
	return newInputsDecay(seed, d, withState, -5, 1.5)
}

// newInputsDecay is newInputs with each head's log-rate a drawn from
// [aMin, aMax]: a ≈ −9 gives heads that remember ~10⁴ tokens.
func newInputsDecay(seed uint64, d Dims, withState bool, aMin, aMax float64) *inputs {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	in := &inputs{d: d}
	normRows := func(x []float32, n int, scale float64) {
		for r := 0; r < len(x)/n; r++ {
			row := x[r*n : (r+1)*n]
			var ss float64
			for i := range row {
				row[i] = float32(rng.NormFloat64())
				ss += float64(row[i]) * float64(row[i])
			}
			inv := scale / math.Sqrt(ss+1e-6)
			for i := range row {
				row[i] = float32(float64(row[i]) * inv)
			}
		}
	}
	in.q = make([]float32, d.T*d.NK*d.DK)
	in.k = make([]float32, d.T*d.NK*d.DK)
	normRows(in.q, d.DK, 1/math.Sqrt(float64(d.DK)))
	normRows(in.k, d.DK, 1)
	in.v = make([]float32, d.T*d.NV*d.DV)
	for i := range in.v {
		in.v[i] = float32(rng.NormFloat64())
	}
	// Per head log-rate a: with the default [-5, 1.5], exp(a)·softplus(b)
	// spans ~1e-3..10.
	logRate := make([]float64, d.NV)
	for j := range logRate {
		logRate[j] = aMin + (aMax-aMin)*rng.Float64()
	}
	in.g = make([]float32, d.T*d.NV)
	in.beta = make([]float32, d.T*d.NV)
	for t := 0; t < d.T; t++ {
		for j := 0; j < d.NV; j++ {
			b := rng.NormFloat64()
			softplus := math.Log1p(math.Exp(b))
			in.g[t*d.NV+j] = float32(-math.Exp(logRate[j]) * softplus)
			in.beta[t*d.NV+j] = float32(1 / (1 + math.Exp(-1.5*rng.NormFloat64())))
		}
	}
	in.state = make([]float32, d.NV*d.DK*d.DV)
	if withState {
		for i := range in.state {
			in.state[i] = float32(0.5 * rng.NormFloat64())
		}
	}
	return in
}

// run applies a kernel to a copy of the initial state and returns the
// outputs and the final state.
func (in *inputs) run(t testing.TB, kern Kernel) (out, state []float32) {
	t.Helper()
	out = make([]float32, in.d.T*in.d.NV*in.d.DV)
	state = append([]float32(nil), in.state...)
	require.NoError(t, kern.Forward(out, in.q, in.k, in.v, in.g, in.beta, in.d, state))
	return out, state
}

// reference64 is the spec recurrence in float64 (inputs as given in
// float32, every intermediate in float64), used to measure each float32
// kernel's own rounding error.
func (in *inputs) reference64() (out, state []float32) {
	d := in.d
	dk, dv, r := d.DK, d.DV, d.NV/d.NK
	out = make([]float32, d.T*d.NV*dv)
	state = make([]float32, len(in.state))
	S := make([]float64, dk*dv)
	y := make([]float64, dv)
	for j := 0; j < d.NV; j++ {
		for i := range S {
			S[i] = float64(in.state[j*dk*dv+i])
		}
		kh := j / r
		for t := 0; t < d.T; t++ {
			q := in.q[(t*d.NK+kh)*dk:][:dk]
			k := in.k[(t*d.NK+kh)*dk:][:dk]
			v := in.v[(t*d.NV+j)*dv:][:dv]
			alpha := math.Exp(float64(in.g[t*d.NV+j]))
			b := float64(in.beta[t*d.NV+j])
			for i := range S {
				S[i] *= alpha
			}
			clear(y)
			for i := 0; i < dk; i++ {
				for c := 0; c < dv; c++ {
					y[c] += float64(k[i]) * S[i*dv+c]
				}
			}
			for c := range y {
				y[c] = b * (float64(v[c]) - y[c])
			}
			for i := 0; i < dk; i++ {
				for c := 0; c < dv; c++ {
					S[i*dv+c] += float64(k[i]) * y[c]
				}
			}
			o := out[(t*d.NV+j)*dv:][:dv]
			for c := 0; c < dv; c++ {
				var s float64
				for i := 0; i < dk; i++ {
					s += float64(q[i]) * S[i*dv+c]
				}
				o[c] = float32(s)
			}
		}
		for i := range S {
			state[j*dk*dv+i] = float32(S[i])
		}
	}
	return out, state
}

// tol32 is the agreement we demand between float32 implementations and
// from each of them to the float64 recurrence: the bar of 1e-5
// relative L2. Observed errors are 1e-7–1e-6 (float32 has 6e-8 unit
// roundoff and the state accumulates a few hundred roundings per entry),
// so a wrong mask, decay or transpose, which gives errors of order 1e-2
// or more, cannot pass.
const tol32 = 1e-5

func TestNaiveMatchesFloat64(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         Dims
		withState bool
	}{
		{"T1", Dims{T: 1, NK: 1, NV: 1, DK: 8, DV: 8}, true},
		{"gqa3", Dims{T: 40, NK: 2, NV: 6, DK: 16, DV: 24}, false},
		{"gqa3-state", Dims{T: 40, NK: 2, NV: 6, DK: 16, DV: 24}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInputs(1, tc.d, tc.withState)
			out, st := in.run(t, Naive{})
			out64, st64 := in.reference64()
			eo, es := tensor.RelL2(out, out64), tensor.RelL2(st, st64)
			t.Logf("naive vs float64: out %.2e state %.2e", eo, es)
			require.LessOrEqual(t, eo, tol32)
			require.LessOrEqual(t, es, tol32)
		})
	}
}

// TestNaiveHandComputed checks one token against arithmetic done by hand,
// so the reference itself is not only checked against another copy of the
// same recurrence.
func TestNaiveHandComputed(t *testing.T) {
	// DK = DV = 2, S0 = [[1,0],[0,2]], k̂ = (1,0), q̂ = (0,1), v = (3,4),
	// g = ln ½ so α = ½, β = ½.
	// S′ = [[½,0],[0,1]]; S′ᵀk̂ = (½,0); δ = ½((3,4) − (½,0)) = (1.25, 2);
	// S = S′ + k̂δᵀ = [[1.75,2],[0,1]]; o = Sᵀq̂ = (0,1).
	d := Dims{T: 1, NK: 1, NV: 1, DK: 2, DV: 2}
	state := []float32{1, 0, 0, 2}
	out := make([]float32, 2)
	g := []float32{float32(math.Log(0.5))}
	for _, kern := range []Kernel{Naive{}, Chunked{}, Recurrent{}} {
		st := append([]float32(nil), state...)
		require.NoError(t, kern.Forward(out, []float32{0, 1}, []float32{1, 0}, []float32{3, 4}, g, []float32{0.5}, d, st))
		require.InDeltaSlice(t, []float32{0, 1}, out, 1e-6)
		require.InDeltaSlice(t, []float32{1.75, 2, 0, 1}, st, 1e-6)
	}
}

func TestKernelsRejectBadInput(t *testing.T) {
	good := Dims{T: 3, NK: 2, NV: 4, DK: 4, DV: 5}
	in := newInputs(3, good, false)
	out := make([]float32, good.T*good.NV*good.DV)
	for _, kern := range []Kernel{Naive{}, Recurrent{}, Chunked{}, Chunked{ChunkSize: 16}} {
		// Each case breaks exactly one thing.
		require.Error(t, kern.Forward(out[1:], in.q, in.k, in.v, in.g, in.beta, good, in.state), "short out")
		require.Error(t, kern.Forward(out, in.q[1:], in.k, in.v, in.g, in.beta, good, in.state), "short q")
		require.Error(t, kern.Forward(out, in.q, in.k[1:], in.v, in.g, in.beta, good, in.state), "short k")
		require.Error(t, kern.Forward(out, in.q, in.k, in.v[1:], in.g, in.beta, good, in.state), "short v")
		require.Error(t, kern.Forward(out, in.q, in.k, in.v, in.g[1:], in.beta, good, in.state), "short g")
		require.Error(t, kern.Forward(out, in.q, in.k, in.v, in.g, in.beta[1:], good, in.state), "short beta")
		require.Error(t, kern.Forward(out, in.q, in.k, in.v, in.g, in.beta, good, in.state[1:]), "short state")
		bad := good
		bad.NV = 3 // not a multiple of NK
		require.Error(t, kern.Forward(out, in.q, in.k, in.v, in.g, in.beta, bad, in.state), "NV%NK")
		bad = good
		bad.DK = 0
		require.Error(t, kern.Forward(out, in.q, in.k, in.v, in.g, in.beta, bad, in.state), "DK=0")
		require.NoError(t, kern.Forward(out, in.q, in.k, in.v, in.g, in.beta, good, append([]float32(nil), in.state...)))
	}
	for _, cs := range []int{-64, 1, 48, 256} {
		err := Chunked{ChunkSize: cs}.Forward(out, in.q, in.k, in.v, in.g, in.beta, good, in.state)
		require.Error(t, err, "chunk size %d", cs)
	}
}

func TestZeroTokensLeaveStateAlone(t *testing.T) {
	d := Dims{T: 0, NK: 1, NV: 2, DK: 4, DV: 4}
	state := make([]float32, 2*4*4)
	for i := range state {
		state[i] = float32(i)
	}
	want := append([]float32(nil), state...)
	for _, kern := range []Kernel{Naive{}, Chunked{}, Recurrent{}} {
		require.NoError(t, kern.Forward(nil, nil, nil, nil, nil, nil, d, state))
		require.Equal(t, want, state)
	}
}
