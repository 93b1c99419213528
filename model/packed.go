package model

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// A packed forward runs several short samples in one row (Options.Segments,
// RunOptions.Segments, as cu_seqlens): the projections, the MLP and the MoE
// router and shared expert run over all the packed rows at once, which is
// where packing gains, while each sample's conv, recurrence and attention
// run alone from an empty state with its positions from 0. Every row then
// equals, bit for bit, the same row of its sample run alone on the same
// backend, on naive and chunked; the CPU pieces that make it so are the
// layers' segment entries, the per-sample MoE experts and packedMatMul.

// shortSegment is the longest sample whose products packedMatMul reruns
// alone: linalg.Blocked streams products of at most 8 rows (M ≤ 6 or 8 by
// level) in another summation order than its GEMM, whose rows do not
// depend on M.
const shortSegment = 8

// checkPacking validates segment starts for t rows: nil when there is one
// sequence (no segments, or one starting at 0).
func checkPacking(segs []int, t int) error {
	if len(segs) == 0 {
		return nil
	}
	if err := gateddelta.CheckSegments(segs, t); err != nil {
		return fmt.Errorf("packed segments: %w", err)
	}
	return nil
}

// packedMatMul returns mm for one sequence, and for packed samples a
// product that reruns each short sample's rows alone after the call over
// all rows, so that they get the bits they get unpacked.
func packedMatMul(mm linalg.MatMuler, segs []int, t int) linalg.MatMuler {
	if len(segs) < 2 {
		return mm
	}
	if _, ok := mm.(linalg.Naive); ok { // row by row already
		return mm
	}
	return segmentMatMul{mm, segs, t}
}

type segmentMatMul struct {
	mm   linalg.MatMuler
	segs []int
	t    int
}

// MatMulT implements linalg.MatMuler over the packed rows.
func (s segmentMatMul) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := s.mm.MatMulT(y, x, m, w); err != nil || m != s.t {
		return err
	}
	n, k := w.Rows, w.Cols
	for i, a := range s.segs {
		e := s.t
		if i+1 < len(s.segs) {
			e = s.segs[i+1]
		}
		if e-a <= shortSegment {
			if err := s.mm.MatMulT(y[a*n:e*n], x[a*k:e*k], e-a, w); err != nil {
				return err
			}
		}
	}
	return nil
}
