package reference

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/gateddelta"
)

// GDNBackwardFunc is a float32 backward of the gated delta rule for one
// sequence, with GDNBackwardF32's arguments.
type GDNBackwardFunc func(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal []float32, d gateddelta.Dims) error

// NaiveGDNBackward is qwenref's built-in float32 backward of the gated
// delta rule over packed sequences: PackedGDNBackward with GDNBackwardF32.
func NaiveGDNBackward(q, k, v, g, beta []float32, d gateddelta.Dims, segs []int, states, dout, dfinal []float32, l2 bool) ([6][]float32, error) {
	return PackedGDNBackward(GDNBackwardF32, q, k, v, g, beta, d, segs, states, dout, dfinal, l2)
}

// PackedGDNBackward runs kern over packed sequences (segs tokens each, from
// the states in states [len(segs), NV, DK, DV], with dfinal their final
// states' gradients), what `qwenref check --grad` runs on a gdn-core
// gradient file. With l2 the op normalises q and k itself: kern gets the
// normalised rows and the norm's backward runs here, in float32. It
// returns dq, dk, dv, dg, dβ and the initial states' gradients.
func PackedGDNBackward(kern GDNBackwardFunc, q, k, v, g, beta []float32, d gateddelta.Dims, segs []int, states, dout, dfinal []float32, l2 bool) ([6][]float32, error) {
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
		dq, dk := sl(res[0], qk), sl(res[1], qk)
		if err := kern(dq, dk, sl(res[2], hv), sl(res[3], d.NV), sl(res[4], d.NV), res[5][i*sz:(i+1)*sz],
			qs, ks, sl(v, hv), sl(g, d.NV), sl(beta, d.NV), states[i*sz:(i+1)*sz], sl(dout, hv), dfinal[i*sz:(i+1)*sz], sd); err != nil {
			return res, err
		}
		if l2 {
			copy(dq, l2Backward(sl(q, qk), dq, d.DK, scale))
			copy(dk, l2Backward(sl(k, qk), dk, d.DK, 1))
		}
		at += n
	}
	return res, nil
}
