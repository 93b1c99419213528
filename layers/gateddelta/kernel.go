package gateddelta

import (
	"fmt"
	"math"
)

// Dims are the shapes of one gated-delta-rule call for one sequence.
// Value head j reads query/key head j / (NV/NK) (transformers'
// repeat_interleave), so NV must be a multiple of NK.
type Dims struct {
	T      int // tokens
	NK, NV int // query/key heads, value heads
	DK, DV int // key and value head dims
}

// Kernel runs the gated delta rule core for one sequence.
//
//   - q, k [T, NK, DK]: already L2-normalised (eps on the sum); q already
//     multiplied by DK^-1/2.
//   - v [T, NV, DV].
//   - g [T, NV]: log-decay (≤ 0), α = exp(g). beta [T, NV]: write strength.
//   - state [NV, DK, DV] float32: the initial state on entry (zeros for a
//     new sequence) and the final state on return.
//   - out [T, NV, DV]: o_t = S_tᵀ q̂_t, read after the update; written in
//     full (its old contents are arbitrary: layers lend pooled buffers).
//
// Naive (per-position recurrence), Recurrent (the fused recurrence),
// Chunked (WY/UT chunks) and the CUDA backend satisfy it.
type Kernel interface {
	Forward(out, q, k, v, g, beta []float32, d Dims, state []float32) error
}

// Check validates the dims and every slice length.
func (d Dims) Check(out, q, k, v, g, beta, state []float32) error {
	if d.T < 0 || d.NK <= 0 || d.NV <= 0 || d.DK <= 0 || d.DV <= 0 {
		return fmt.Errorf("gateddelta: bad dims %+v", d)
	}
	if d.NV%d.NK != 0 {
		return fmt.Errorf("gateddelta: value heads %d not a multiple of key heads %d", d.NV, d.NK)
	}
	// Bound the products below so that none can wrap around and match a
	// slice length by accident.
	const limit = math.MaxInt / 4
	if !productFits(limit, d.T, d.NV, max(d.DK, d.DV)) || !productFits(limit, d.NV, d.DK, d.DV) {
		return fmt.Errorf("gateddelta: dims %+v exceed %d values per tensor", d, limit)
	}
	for _, c := range []struct {
		name string
		got  int
		want int
	}{
		{"q", len(q), d.T * d.NK * d.DK},
		{"k", len(k), d.T * d.NK * d.DK},
		{"v", len(v), d.T * d.NV * d.DV},
		{"g", len(g), d.T * d.NV},
		{"beta", len(beta), d.T * d.NV},
		{"out", len(out), d.T * d.NV * d.DV},
		{"state", len(state), d.NV * d.DK * d.DV},
	} {
		if c.got != c.want {
			return fmt.Errorf("gateddelta: %s has %d values, want %d for %+v", c.name, c.got, c.want, d)
		}
	}
	return nil
}

// productFits reports whether the product of xs (all ≥ 0) is at most limit.
func productFits(limit int, xs ...int) bool {
	p := 1
	for _, x := range xs {
		if x != 0 && p > limit/x {
			return false
		}
		p *= x
	}
	return p <= limit
}
