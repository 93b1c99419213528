package moe

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/parallel"
	"github.com/qwenref/qwenref/linalg"
)

// Naive runs each token through each of its chosen experts in turn: the
// per-token loop of the equation, one matrix-vector product per expert
// projection. It is the readable truth the grouped form is tested against.
type Naive struct{}

// Experts implements Kernel.
func (Naive) Experts(out, x []float32, t int, l *Layer, r *Routing, mm linalg.MatMuler) error {
	d := l.Dims
	h := d.Hidden
	y := make([]float32, h)
	for i := range out {
		out[i] = 0
	}
	for tok := range t {
		xt, ot := x[tok*h:(tok+1)*h], out[tok*h:(tok+1)*h]
		for j := range r.K {
			e := r.Experts[tok*r.K+j]
			if err := swiGLU(y, xt, 1, l.W.Gate[e], l.W.Up[e], l.W.Down[e], mm); err != nil {
				return fmt.Errorf("moe expert %d: %w", e, err)
			}
			w := r.Weights[tok*r.K+j]
			for c, v := range y {
				ot[c] += w * v
			}
		}
	}
	return nil
}

// Grouped gathers the tokens routed to each expert into one block and runs
// the expert's three projections as GEMMs over that block, then adds each
// row back to its token with its weight. Experts are visited in ascending
// index (the order of transformers' loop), so every token's sum is added
// in the same order whatever T is.
type Grouped struct{}

// Experts implements Kernel.
func (Grouped) Experts(out, x []float32, t int, l *Layer, r *Routing, mm linalg.MatMuler) error {
	d := l.Dims
	h := d.Hidden
	for i := range out {
		out[i] = 0
	}
	// Counting sort of the (token, rank) pairs by expert.
	start := make([]int, d.Experts+1)
	for _, e := range r.Experts {
		start[e+1]++
	}
	for e := range d.Experts {
		start[e+1] += start[e]
	}
	slot := make([]int32, len(r.Experts)) // pair index (tok·k + rank), grouped by expert
	next := append([]int(nil), start[:d.Experts]...)
	for p, e := range r.Experts {
		slot[next[e]] = int32(p)
		next[e]++
	}
	var hit []int
	for e := range d.Experts {
		if start[e+1] > start[e] {
			hit = append(hit, e)
		}
	}
	// Experts run concurrently, each into its own rows of ys (slot order);
	// the weighted adds below then go in expert order, so the result does
	// not depend on the scheduling.
	xs := make([]float32, len(slot)*h)
	ys := make([]float32, len(slot)*h)
	errs := make([]error, len(hit))
	parallel.Each(len(hit), 0, func(_, j int) {
		e := hit[j]
		lo, hi := start[e], start[e+1]
		xe, ye := xs[lo*h:hi*h], ys[lo*h:hi*h]
		for i, p := range slot[lo:hi] {
			tok := int(p) / r.K
			copy(xe[i*h:(i+1)*h], x[tok*h:(tok+1)*h])
		}
		if err := swiGLU(ye, xe, hi-lo, l.W.Gate[e], l.W.Up[e], l.W.Down[e], mm); err != nil {
			errs[j] = fmt.Errorf("moe expert %d: %w", e, err)
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, e := range hit {
		pairs := slot[start[e]:start[e+1]]
		ys := ys[start[e]*h : start[e+1]*h]
		for i, p := range pairs {
			tok := int(p) / r.K
			w := r.Weights[p]
			ot, yr := out[tok*h:(tok+1)*h], ys[i*h:(i+1)*h]
			for c, v := range yr {
				ot[c] += w * v
			}
		}
	}
	return nil
}
