package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/gateddelta"
)

// The backward pass of the gated delta rule (docs/learn/06-gradients.md).
// With ∂S the gradient of the loss with respect to the state after token
// t, per value head and going back in time:
//
//	dq_t  += S_t ∂o_t                 ∂S += q_t ∂o_tᵀ         the read
//	dk_t  += ∂S δ_t                   ∂δ  = ∂Sᵀ k_t           the write
//	dβ_t   = ∂δ·(v_t − S′ᵀk_t)        dv_t = β_t ∂δ
//	∂p     = −β_t ∂δ                  ∂S′ = ∂S + k_t ∂pᵀ      the prediction
//	dk_t  += S′ ∂p
//	dg_t   = ⟨∂S′, S′⟩                ∂S ← e^{g_t} ∂S′        the decay
//
// and dS₀ is ∂S after token 0. A key head's dq and dk sum over the value
// heads that read it.

// float is the element type of the generic passes: float64 for the
// reference, float32 for the float32 kernel that sets a gradient golden's
// bars (gradtol.go).
type float interface{ ~float32 | ~float64 }

// GDNGrads are the gradients of the gated delta rule's inputs, each laid
// out as its input: Q, K [T, NK, DK], V [T, NV, DV], G, Beta [T, NV],
// State [NV, DK, DV] (the initial state's).
type GDNGrads struct {
	Q, K, V, G, Beta, State []float64
}

// gdnCheckpoint is the tokens between the states the backward pass keeps:
// it recomputes the states inside a block from the block's first, so
// memory is (T/64 + 64)·DK·DV per head, not T·DK·DV.
const gdnCheckpoint = 64

// GatedDeltaRuleBackward is the gradient of GatedDeltaRule in float64 for
// one sequence: given the inputs (q, k as the core takes them: normalised,
// q scaled), the initial state, the upstream gradient dout [T, NV, DV] of
// the output and dfinal [NV, DK, DV] of the final state (nil: zero), it
// returns every input's gradient. The inputs are not changed.
func GatedDeltaRuleBackward(q, k, v, g, beta []float64, d gateddelta.Dims, state, dout, dfinal []float64) (*GDNGrads, error) {
	if err := checkGDN(dout, q, k, v, g, beta, d, state); err != nil {
		return nil, err
	}
	if dfinal != nil {
		if err := checkLens("gated delta rule backward", d, []lenCheck{{"dfinal", len(dfinal), d.NV * d.DK * d.DV}}); err != nil {
			return nil, err
		}
	}
	gr := gdnBackward(q, k, v, g, beta, d, state, dout, dfinal, nil)
	return &GDNGrads{gr[0], gr[1], gr[2], gr[3], gr[4], gr[5]}, nil
}

// gdnBackward is the backward pass in F; store, when set, rounds what a
// kernel keeps in memory between steps (the checkpointed states, δ and
// ∂S at block edges), to model a kernel that stores them in bf16. It
// returns dq, dk, dv, dg, dβ, dS₀. The lengths are checked by the caller.
func gdnBackward[F float](q, k, v, g, beta []F, d gateddelta.Dims, state, dout, dfinal []F, store func(F) F) [6][]F {
	dk, dv, r := d.DK, d.DV, d.NV/d.NK
	sz := dk * dv
	gq, gk := make([]F, len(q)), make([]F, len(k))
	gv, gg, gb := make([]F, len(v)), make([]F, len(g)), make([]F, len(beta))
	gs := make([]F, len(state))
	nb := (d.T + gdnCheckpoint - 1) / gdnCheckpoint
	cps := make([]F, nb*sz)                // the state before each block
	blk := make([]F, (gdnCheckpoint+1)*sz) // S_{t−1} for each token of a block, then S_t of its last
	sp, pred, del := make([]F, sz), make([]F, dv), make([]F, dv)
	bPred, bDel := make([]F, gdnCheckpoint*dv), make([]F, gdnCheckpoint*dv) // a block's S′ᵀk and δ
	dS, dd := make([]F, sz), make([]F, dv)
	keep := func(x []F) {
		if store != nil {
			for i := range x {
				x[i] = store(x[i])
			}
		}
	}
	// step runs token t from prev into next, leaving S′ in sp, S′ᵀk in pred
	// and δ in del.
	step := func(j, t int, prev, next []F) {
		kt := k[(t*d.NK+j/r)*dk:][:dk]
		vt := v[(t*d.NV+j)*dv:][:dv]
		alpha, b := F(math.Exp(float64(g[t*d.NV+j]))), beta[t*d.NV+j]
		for i := range sp {
			sp[i] = alpha * prev[i]
		}
		clear(pred)
		for i := 0; i < dk; i++ {
			for c := 0; c < dv; c++ {
				pred[c] += kt[i] * sp[i*dv+c]
			}
		}
		for c := range del {
			del[c] = b * (vt[c] - pred[c])
		}
		keep(del)
		for i := 0; i < dk; i++ {
			for c := 0; c < dv; c++ {
				next[i*dv+c] = sp[i*dv+c] + kt[i]*del[c]
			}
		}
	}
	for j := 0; j < d.NV; j++ {
		kh := j / r
		S := append([]F(nil), state[j*sz:(j+1)*sz]...)
		next := make([]F, sz)
		for t := 0; t < d.T; t++ {
			if t%gdnCheckpoint == 0 {
				copy(cps[t/gdnCheckpoint*sz:], S)
				keep(cps[t/gdnCheckpoint*sz:][:sz])
				copy(S, cps[t/gdnCheckpoint*sz:][:sz])
			}
			step(j, t, S, next)
			S, next = next, S
		}
		clear(dS)
		if dfinal != nil {
			copy(dS, dfinal[j*sz:(j+1)*sz])
		}
		for b := nb - 1; b >= 0; b-- {
			t0, t1 := b*gdnCheckpoint, min((b+1)*gdnCheckpoint, d.T)
			copy(blk, cps[b*sz:(b+1)*sz])
			for t := t0; t < t1; t++ {
				step(j, t, blk[(t-t0)*sz:][:sz], blk[(t-t0+1)*sz:][:sz])
				copy(bPred[(t-t0)*dv:], pred)
				copy(bDel[(t-t0)*dv:], del)
			}
			for t := t1 - 1; t >= t0; t-- {
				prev, cur := blk[(t-t0)*sz:][:sz], blk[(t-t0+1)*sz:][:sz]
				pred, del := bPred[(t-t0)*dv:][:dv], bDel[(t-t0)*dv:][:dv]
				qt := q[(t*d.NK+kh)*dk:][:dk]
				kt := k[(t*d.NK+kh)*dk:][:dk]
				vt := v[(t*d.NV+j)*dv:][:dv]
				do := dout[(t*d.NV+j)*dv:][:dv]
				dqt := gq[(t*d.NK+kh)*dk:][:dk]
				dkt := gk[(t*d.NK+kh)*dk:][:dk]
				dvt := gv[(t*d.NV+j)*dv:][:dv]
				alpha, bt := F(math.Exp(float64(g[t*d.NV+j]))), beta[t*d.NV+j]
				for i := range sp {
					sp[i] = alpha * prev[i]
				}
				// The read o_t = S_tᵀ q_t.
				for i := 0; i < dk; i++ {
					var s F
					for c := 0; c < dv; c++ {
						s += cur[i*dv+c] * do[c]
						dS[i*dv+c] += qt[i] * do[c]
					}
					dqt[i] += s
				}
				// The write S_t = S′ + k δᵀ.
				clear(dd)
				for i := 0; i < dk; i++ {
					var s F
					for c := 0; c < dv; c++ {
						s += dS[i*dv+c] * del[c]
						dd[c] += kt[i] * dS[i*dv+c]
					}
					dkt[i] += s
				}
				// δ = β (v − p).
				var db F
				for c := 0; c < dv; c++ {
					db += dd[c] * (vt[c] - pred[c])
					dvt[c] = bt * dd[c]
					dd[c] *= -bt // now ∂p
				}
				gb[t*d.NV+j] = db
				// p = S′ᵀ k, then S′ = α S_{t−1}.
				var dgt F
				for i := 0; i < dk; i++ {
					var s F
					for c := 0; c < dv; c++ {
						s += sp[i*dv+c] * dd[c]
						dS[i*dv+c] += kt[i] * dd[c]
						dgt += dS[i*dv+c] * sp[i*dv+c]
						dS[i*dv+c] *= alpha
					}
					dkt[i] += s
				}
				gg[t*d.NV+j] = dgt
			}
			keep(dS)
		}
		copy(gs[j*sz:], dS)
	}
	return [6][]F{gq, gk, gv, gg, gb, gs}
}

// l2Eps is the ε the layer and fla's in-kernel norm add to Σx².
const l2Eps = 1e-6

// GatedDeltaRuleL2 is GatedDeltaRule with the L2 norm of q and k done in
// the op (fla's use_qk_l2norm_in_kernel, transformers' fallback): q and k
// arrive raw, and the core reads q̂ = q/√(Σq²+ε)·DK^-1/2, k̂ = k/√(Σk²+ε)
// with ε = 1e-6. q and k are not changed.
func GatedDeltaRuleL2(out, q, k, v, g, beta []float64, d gateddelta.Dims, state []float64) error {
	qh, kh, err := l2Prep(q, k, d)
	if err != nil {
		return err
	}
	return GatedDeltaRule(out, qh, kh, v, g, beta, d, state)
}

// GatedDeltaRuleL2Backward is the gradient of GatedDeltaRuleL2: the core's
// gradient, then the L2 norm's (dx = s·r·(dŷ − ŷ(ŷ·dŷ)) per row, with
// r = 1/√(Σx²+ε), ŷ = x·r and s the scale), so Q and K are the raw
// inputs' gradients.
func GatedDeltaRuleL2Backward(q, k, v, g, beta []float64, d gateddelta.Dims, state, dout, dfinal []float64) (*GDNGrads, error) {
	qh, kh, err := l2Prep(q, k, d)
	if err != nil {
		return nil, err
	}
	gr, err := GatedDeltaRuleBackward(qh, kh, v, g, beta, d, state, dout, dfinal)
	if err != nil {
		return nil, err
	}
	gr.Q = l2Backward(q, gr.Q, d.DK, 1/math.Sqrt(float64(d.DK)))
	gr.K = l2Backward(k, gr.K, d.DK, 1)
	return gr, nil
}

// l2Prep returns q̂ and k̂ as GatedDeltaRuleL2 defines them.
func l2Prep[F float](q, k []F, d gateddelta.Dims) (qh, kh []F, err error) {
	if d.DK <= 0 || len(q) != d.T*d.NK*d.DK || len(k) != len(q) {
		return nil, nil, fmt.Errorf("reference gated delta rule: q has %d and k %d values, want %d each for %+v", len(q), len(k), d.T*d.NK*d.DK, d)
	}
	qh, kh = l2Rows(q, d.DK, F(1/math.Sqrt(float64(d.DK)))), l2Rows(k, d.DK, 1)
	return qh, kh, nil
}

// l2Rows is x/√(Σx²+ε)·s per row of dim values, in a new slice.
func l2Rows[F float](x []F, dim int, s F) []F {
	y := make([]F, len(x))
	for r := 0; r < len(x); r += dim {
		var ss F
		for _, v := range x[r : r+dim] {
			ss += v * v
		}
		inv := s / F(math.Sqrt(float64(ss)+l2Eps))
		for i := r; i < r+dim; i++ {
			y[i] = x[i] * inv
		}
	}
	return y
}

// l2Backward maps the gradient dy of y = s·x/√(Σx²+ε) (per row) to x's.
func l2Backward[F float](x, dy []F, dim int, s F) []F {
	dx := make([]F, len(x))
	for r := 0; r < len(x); r += dim {
		var ss, xdy F
		for i := r; i < r+dim; i++ {
			ss += x[i] * x[i]
			xdy += x[i] * dy[i]
		}
		inv := 1 / F(math.Sqrt(float64(ss)+l2Eps))
		for i := r; i < r+dim; i++ {
			dx[i] = s * inv * (dy[i] - x[i]*inv*inv*xdy)
		}
	}
	return dx
}
