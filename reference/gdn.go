package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/gateddelta"
)

// GatedDeltaRule runs the gated delta rule core for one sequence in float64,
// with the layouts and conventions of gateddelta.Kernel:
//
//   - q, k [T, NK, DK]: already L2-normalised, q already scaled by DK^-1/2;
//   - v [T, NV, DV]; g, beta [T, NV] (g is the log-decay, α = e^g);
//   - state [NV, DK, DV]: the initial state on entry, the final one on return;
//   - out [T, NV, DV].
//
// Value head j reads query/key head j/(NV/NK). Per head and position:
//
//	S′ = α_t S_{t−1}                 decay first
//	δ  = β_t (v_t − S′ᵀ k_t)          the write is the prediction error
//	S_t = S′ + k_t δᵀ                 rank-one update
//	o_t = S_tᵀ q_t                    read after the update
func GatedDeltaRule(out, q, k, v, g, beta []float64, d gateddelta.Dims, state []float64) error {
	if err := checkGDN(out, q, k, v, g, beta, d, state); err != nil {
		return err
	}
	dk, dv, r := d.DK, d.DV, d.NV/d.NK
	pred := make([]float64, dv)
	for j := 0; j < d.NV; j++ {
		S := state[j*dk*dv : (j+1)*dk*dv] // S[i*dv+c] = S[i][c]
		kh := j / r
		for t := 0; t < d.T; t++ {
			qt := q[(t*d.NK+kh)*dk:][:dk]
			kt := k[(t*d.NK+kh)*dk:][:dk]
			vt := v[(t*d.NV+j)*dv:][:dv]
			alpha, b := math.Exp(g[t*d.NV+j]), beta[t*d.NV+j]
			for i := range S {
				S[i] *= alpha
			}
			clear(pred)
			for i := 0; i < dk; i++ {
				for c := 0; c < dv; c++ {
					pred[c] += kt[i] * S[i*dv+c]
				}
			}
			for c := range pred {
				pred[c] = b * (vt[c] - pred[c]) // δ, reusing the buffer
			}
			for i := 0; i < dk; i++ {
				for c := 0; c < dv; c++ {
					S[i*dv+c] += kt[i] * pred[c]
				}
			}
			ot := out[(t*d.NV+j)*dv:][:dv]
			clear(ot)
			for i := 0; i < dk; i++ {
				for c := 0; c < dv; c++ {
					ot[c] += qt[i] * S[i*dv+c]
				}
			}
		}
	}
	return nil
}

func checkGDN(out, q, k, v, g, beta []float64, d gateddelta.Dims, state []float64) error {
	if d.T < 0 || d.NK <= 0 || d.NV <= 0 || d.DK <= 0 || d.DV <= 0 {
		return fmt.Errorf("reference: bad gated delta dims %+v", d)
	}
	if d.NV%d.NK != 0 {
		return fmt.Errorf("reference: value heads %d not a multiple of key heads %d", d.NV, d.NK)
	}
	return checkLens("gated delta rule", d, []lenCheck{
		{"q", len(q), d.T * d.NK * d.DK},
		{"k", len(k), d.T * d.NK * d.DK},
		{"v", len(v), d.T * d.NV * d.DV},
		{"g", len(g), d.T * d.NV},
		{"beta", len(beta), d.T * d.NV},
		{"out", len(out), d.T * d.NV * d.DV},
		{"state", len(state), d.NV * d.DK * d.DV},
	})
}

type lenCheck struct {
	name      string
	got, want int
}

func checkLens(op string, dims any, cs []lenCheck) error {
	for _, c := range cs {
		if c.got != c.want {
			return fmt.Errorf("reference %s: %s has %d values, want %d for %+v", op, c.name, c.got, c.want, dims)
		}
	}
	return nil
}

// L2Normalize scales each row of length dim of x to unit L2 norm in place,
// with eps added to the sum of squares (x/√(Σx²+eps)), as the Gated
// DeltaNet layer does to q and k before the core.
func L2Normalize(x []float64, dim int, eps float64) error {
	if dim <= 0 || len(x)%dim != 0 {
		return fmt.Errorf("reference: l2 normalize: %d values do not split into rows of %d", len(x), dim)
	}
	for r := 0; r < len(x); r += dim {
		row := x[r : r+dim]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss+eps)
		for i := range row {
			row[i] *= inv
		}
	}
	return nil
}
