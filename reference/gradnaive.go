package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/gateddelta"
)

// NaiveGDNBackward is qwenref's built-in float32 backward of the gated
// delta rule over packed sequences (segs tokens each, from the states in
// states [len(segs), NV, DK, DV], with dfinal their final states'
// gradients): the reference's recurrence run in float32, what
// `qwenref check --grad` runs on a gdn-core gradient file. With l2 the
// op normalises q and k itself. It returns dq, dk, dv, dg, dβ and the
// initial states' gradients.
func NaiveGDNBackward(q, k, v, g, beta []float32, d gateddelta.Dims, segs []int, states, dout, dfinal []float32, l2 bool) ([6][]float32, error) {
	var res [6][]float32
	if err := checkGDNDims(d); err != nil { // bounds the products below
		return res, err
	}
	if _, err := segments(d.T, segs); err != nil {
		return res, err
	}
	sz, qk, hv := d.NV*d.DK*d.DV, d.NK*d.DK, d.NV*d.DV
	if len(states) < sz {
		return res, fmt.Errorf("gdn-core backward: %d state values, want %d per sequence", len(states), sz)
	}
	if err := d.Check(dout, q, k, v, g, beta, states[:sz]); err != nil {
		return res, err
	}
	if len(states) != len(segs)*sz || len(dfinal) != len(states) {
		return res, fmt.Errorf("gdn-core backward: %d states and %d final-state gradients for %d sequences of %d", len(states), len(dfinal), len(segs), sz)
	}
	res = [6][]float32{make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v)),
		make([]float32, len(g)), make([]float32, len(beta)), make([]float32, len(states))}
	scale := float32(1 / math.Sqrt(float64(d.DK)))
	at := 0
	for i, n := range segs {
		sd := d
		sd.T = n
		sl := func(x []float32, w int) []float32 { return x[at*w : (at+n)*w] }
		qs, ks := sl(q, qk), sl(k, qk)
		if l2 {
			qs, ks = l2Rows(qs, d.DK, scale), l2Rows(ks, d.DK, 1)
		}
		r := gdnBackward(qs, ks, sl(v, hv), sl(g, d.NV), sl(beta, d.NV), sd, states[i*sz:(i+1)*sz], sl(dout, hv), dfinal[i*sz:(i+1)*sz], nil)
		if l2 {
			r[0], r[1] = l2Backward(sl(q, qk), r[0], d.DK, scale), l2Backward(sl(k, qk), r[1], d.DK, 1)
		}
		for j, w := range []int{qk, qk, hv, d.NV, d.NV} {
			copy(sl(res[j], w), r[j])
		}
		copy(res[5][i*sz:], r[5])
		at += n
	}
	return res, nil
}
