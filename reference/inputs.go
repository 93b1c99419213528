package reference

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// This file owns the input contracts of the three core ops: random inputs,
// drawn from a seed, that obey what each Kernel interface promises its
// callers. The layer tests, bench and `qwenref golden` all draw from here,
// so a contract is written down once.
//
// The gated delta rule's contract (gateddelta.Kernel):
//   - q̂, k̂ rows are unit vectors (L2-normalised with ε = 1e-6 on the sum of
//     squares, as the layer does), and q̂ is further scaled by d_k^-1/2;
//   - g = −exp(a)·softplus(b) ≤ 0, so the decay α = e^g lies in (0, 1];
//   - β = σ(b′) lies in (0, 1).

// Rand is the random stream every generator here draws from: PCG seeded
// with (seed, stream), so one seed gives the same inputs on every machine.
func Rand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// StreamFor derives a stream number from a label such as "gdn-core/2048",
// so different cases of one seed draw independent inputs (FNV-1a).
func StreamFor(label string) uint64 {
	var h uint64 = 1469598103934665603
	for _, b := range []byte(label) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return h
}

// Normals draws n values from N(0, std²), rounded to float32.
func Normals(r *rand.Rand, n int, std float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * std)
	}
	return out
}

// UnitRows draws rows of length dim with L2 norm `norm`: normal draws
// divided by sqrt(Σx² + 1e-6) in float64, then rounded to float32.
func UnitRows(r *rand.Rand, rows, dim int, norm float64) []float32 {
	x := make([]float32, rows*dim)
	tmp := make([]float64, dim)
	for i := 0; i < rows; i++ {
		var ss float64
		for j := range tmp {
			tmp[j] = r.NormFloat64()
			ss += tmp[j] * tmp[j]
		}
		inv := norm / math.Sqrt(ss+1e-6)
		for j, v := range tmp {
			x[i*dim+j] = float32(v * inv)
		}
	}
	return x
}

// Softplus is log(1 + eˣ), exact for large x.
func Softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// GDNOptions shape the random gated-delta-rule problems.
type GDNOptions struct {
	// WithState draws a non-zero initial state (std 0.5) instead of zeros.
	WithState bool
	// LogRateMin and LogRateMax bound each value head's log-rate a in
	// g = −exp(a)·softplus(b); both zero means the default [−5, 1.5], so
	// decay strengths span about 1e-3..10 across heads. a ≈ −9 gives heads
	// that remember ~10⁴ tokens.
	LogRateMin, LogRateMax float64
}

// GDNInputs is one random gated-delta-rule problem for one sequence, laid
// out as gateddelta.Kernel takes it.
type GDNInputs struct {
	Dims             gateddelta.Dims
	Q, K, V, G, Beta []float32
	State            []float32 // initial state [NV, DK, DV]; Run leaves it unchanged
}

// NewGDNInputs draws a problem that obeys the core's contract.
func NewGDNInputs(seed uint64, d gateddelta.Dims, opt GDNOptions) (*GDNInputs, error) {
	if err := checkGDNDims(d); err != nil {
		return nil, err
	}
	lo, hi := opt.LogRateMin, opt.LogRateMax
	if lo == 0 && hi == 0 {
		lo, hi = -5, 1.5
	}
	r := Rand(seed, 0x9e3779b97f4a7c15)
	in := &GDNInputs{Dims: d}
	in.Q = UnitRows(r, d.T*d.NK, d.DK, 1/math.Sqrt(float64(d.DK)))
	in.K = UnitRows(r, d.T*d.NK, d.DK, 1)
	in.V = Normals(r, d.T*d.NV*d.DV, 1)
	logRate := make([]float64, d.NV)
	for j := range logRate {
		logRate[j] = lo + (hi-lo)*r.Float64()
	}
	in.G = make([]float32, d.T*d.NV)
	in.Beta = make([]float32, d.T*d.NV)
	for t := 0; t < d.T; t++ {
		for j := 0; j < d.NV; j++ {
			in.G[t*d.NV+j] = float32(-math.Exp(logRate[j]) * Softplus(r.NormFloat64()))
			in.Beta[t*d.NV+j] = float32(1 / (1 + math.Exp(-1.5*r.NormFloat64())))
		}
	}
	if opt.WithState {
		in.State = Normals(r, d.NV*d.DK*d.DV, 0.5)
	} else {
		in.State = make([]float32, d.NV*d.DK*d.DV)
	}
	return in, nil
}

// checkGDNDims refuses dims a problem cannot be drawn for, before any
// allocation (the products are bounded so they cannot overflow).
func checkGDNDims(d gateddelta.Dims) error {
	const maxElems = math.MaxInt32
	switch {
	case d.T < 0 || d.NK <= 0 || d.NV <= 0 || d.DK <= 0 || d.DV <= 0:
		return fmt.Errorf("gated delta rule inputs: bad dims %+v", d)
	case d.NV%d.NK != 0:
		return fmt.Errorf("gated delta rule inputs: value heads %d not a multiple of key heads %d", d.NV, d.NK)
	case !fits(maxElems, d.T, d.NV, max(d.DK, d.DV)) || !fits(maxElems, d.NV, d.DK, d.DV):
		return fmt.Errorf("gated delta rule inputs: dims %+v exceed %d values per tensor", d, maxElems)
	}
	return nil
}

// fits reports whether the product of dims (all ≥ 0) is at most limit.
func fits(limit int, dims ...int) bool {
	p := 1
	for _, d := range dims {
		if d != 0 && p > limit/d {
			return false
		}
		p *= d
	}
	return p <= limit
}

// Run applies a kernel to a copy of the initial state and returns the
// outputs [T, NV, DV] and the final state.
func (in *GDNInputs) Run(k gateddelta.Kernel) (out, state []float32, err error) {
	d := in.Dims
	out = make([]float32, d.T*d.NV*d.DV)
	nan := float32(math.NaN())
	for i := range out {
		out[i] = nan // the kernel must write every output (layers lend it unzeroed buffers)
	}
	state = append([]float32(nil), in.State...)
	err = k.Forward(out, in.Q, in.K, in.V, in.G, in.Beta, d, state)
	return out, state, err
}

// Reference runs the float64 recurrence on the inputs exactly as stored.
func (in *GDNInputs) Reference() (out, state []float64, err error) {
	d := in.Dims
	out = make([]float64, d.T*d.NV*d.DV)
	state = Widen(in.State)
	err = GatedDeltaRule(out, Widen(in.Q), Widen(in.K), Widen(in.V), Widen(in.G), Widen(in.Beta), d, state)
	return out, state, err
}

// ConvInputs is one random causal-conv problem: x [T, C] ~ N(0, 1), taps
// w [C, K] ~ N(0, 0.25), and an initial state [K, C] (zeros or N(0, 1)).
type ConvInputs struct {
	T, C, K int
	X, W    []float32
	State   []float32
}

// NewConvInputs draws a conv problem.
func NewConvInputs(seed uint64, t, c, k int, withState bool) (*ConvInputs, error) {
	const maxElems = math.MaxInt32
	if t < 0 || c <= 0 || k <= 0 || !fits(maxElems, t, c) || !fits(maxElems, k, c) {
		return nil, fmt.Errorf("conv inputs: bad dims T=%d C=%d K=%d", t, c, k)
	}
	r := Rand(seed, 0x51ed270b27c4a3e5)
	in := &ConvInputs{T: t, C: c, K: k, X: Normals(r, t*c, 1), W: Normals(r, c*k, 0.5)}
	if withState {
		in.State = Normals(r, k*c, 1)
	} else {
		in.State = make([]float32, k*c)
	}
	return in, nil
}

// Reference runs the float64 conv + SiLU on the inputs as stored.
func (in *ConvInputs) Reference() (y, state []float64, err error) {
	y = make([]float64, in.T*in.C)
	state = Widen(in.State)
	err = CausalConvSiLU(y, Widen(in.X), in.T, in.C, Widen(in.W), in.K, state)
	return y, state, err
}

// AttentionInputs is one random attention-core problem: q [T, NH, D] and
// the cache k, v [S, NKV, D], all ~ N(0, 1), with scale D^-1/2.
type AttentionInputs struct {
	Dims    attention.Dims
	Q, K, V []float32
	Scale   float32
}

// NewAttentionInputs draws an attention problem.
func NewAttentionInputs(seed uint64, d attention.Dims) (*AttentionInputs, error) {
	const maxElems = math.MaxInt32
	if d.T < 0 || d.S < d.T || d.NH <= 0 || d.NKV <= 0 || d.D <= 0 || d.NH%d.NKV != 0 ||
		!fits(maxElems, d.S, d.NH, d.D) {
		return nil, fmt.Errorf("attention inputs: bad dims %+v", d)
	}
	r := Rand(seed, 0x2545f4914f6cdd1d)
	return &AttentionInputs{Dims: d,
		Q: Normals(r, d.T*d.NH*d.D, 1), K: Normals(r, d.S*d.NKV*d.D, 1), V: Normals(r, d.S*d.NKV*d.D, 1),
		Scale: float32(1 / math.Sqrt(float64(d.D)))}, nil
}

// Reference runs the float64 attention on the inputs as stored.
func (in *AttentionInputs) Reference() ([]float64, error) {
	d := in.Dims
	out := make([]float64, d.T*d.NH*d.D)
	err := Attention(out, Widen(in.Q), Widen(in.K), Widen(in.V), d, float64(in.Scale))
	return out, err
}
