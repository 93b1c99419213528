package gateddelta

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/tensor"
)

// CheckSegments checks the starts of samples packed one after another in
// t rows (cu_seqlens without its final t): the first is 0 and each is
// past the one before and below t.
func CheckSegments(segs []int, t int) error {
	if len(segs) == 0 {
		return fmt.Errorf("no segments for %d packed rows: the first starts at 0", t)
	}
	for i, s := range segs {
		switch {
		case i == 0 && s != 0:
			return fmt.Errorf("segment 0 starts at row %d, not 0", s)
		case i > 0 && s <= segs[i-1]:
			return fmt.Errorf("segment %d starts at row %d, not after segment %d's start %d", i, s, i-1, segs[i-1])
		case s >= t:
			return fmt.Errorf("segment %d starts at row %d, outside the %d packed rows", i, s, t)
		}
	}
	return nil
}

// segEnd is the row after segment i of segs over t rows.
func segEnd(segs []int, i, t int) int {
	if i+1 < len(segs) {
		return segs[i+1]
	}
	return t
}

// ConvSegments is Conv over packed samples: segs are their start rows
// (CheckSegments), and each sample's conv runs alone from a zero state,
// as a fresh sequence's would. st is left with the last sample's state.
func (l *Layer) ConvSegments(w *Work, st *State, ops Ops, segs []int, rec tensor.Recorder) error {
	d, t, c := l.Dims, w.T, l.Dims.ConvDim()
	if err := l.checkState(st); err != nil {
		return err
	}
	if err := CheckSegments(segs, t); err != nil {
		return fmt.Errorf("gateddelta conv: %w", err)
	}
	w.U = w.buf.Get(t * c)
	for i, s := range segs {
		e := segEnd(segs, i, t)
		clear(st.Conv)
		if err := ops.Conv.Forward(w.U[s*c:e*c], w.M[s*c:e*c], l.W.ConvW, conv1d.Dims{T: e - s, C: c, K: d.ConvK}, st.Conv); err != nil {
			return fmt.Errorf("gateddelta conv, segment %d: %w", i, err)
		}
	}
	rec.Record("conv_out", w.U, t, c)
	return nil
}

// CoreSegments is Core over packed samples: each sample's recurrence
// runs alone from a zero state. It records the rows of every sample and
// the last sample's final state, which st is left holding.
func (l *Layer) CoreSegments(w *Work, st *State, ops Ops, segs []int, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	if err := l.checkState(st); err != nil {
		return err
	}
	if err := CheckSegments(segs, t); err != nil {
		return fmt.Errorf("gateddelta core: %w", err)
	}
	qk, hv := d.NK*d.DK, d.NV*d.DV
	w.O = w.buf.Get(t * hv)
	for i, s := range segs {
		e := segEnd(segs, i, t)
		clear(st.S)
		cd := Dims{T: e - s, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
		err := ops.Core.Forward(w.O[s*hv:e*hv], w.Q[s*qk:e*qk], w.K[s*qk:e*qk], w.V[s*hv:e*hv],
			w.G[s*d.NV:e*d.NV], w.Beta[s*d.NV:e*d.NV], cd, st.S)
		if err != nil {
			return fmt.Errorf("gateddelta core, segment %d: %w", i, err)
		}
	}
	rec.Record("core_out", w.O, t, d.NV, d.DV)
	rec.Record("final_state", st.S, d.NV, d.DK, d.DV)
	return nil
}
