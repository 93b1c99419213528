package moe

import (
	"fmt"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// ExpertsSegments is Experts over packed samples (segs: their start rows,
// the first 0): kern runs on each sample's rows alone, so each expert's
// products see the rows they see when the sample runs by itself. Routing
// is per token; a grouped kernel's product over m rows need not equal,
// bit for bit, the same rows inside a larger m (linalg's streaming path
// for small m sums in another order), which running per sample avoids.
func (l *Layer) ExpertsSegments(out []float32, w *Work, x []float32, kern Kernel, mm linalg.MatMuler, segs []int, rec tensor.Recorder) error {
	h, t, k := l.Dims.Hidden, w.T, w.Routing.K
	if len(out) != t*h || len(x) != t*h {
		return fmt.Errorf("moe: out and x have %d and %d values, want T·H = %d·%d", len(out), len(x), t, h)
	}
	if len(segs) == 0 || segs[0] != 0 {
		return fmt.Errorf("moe: packed rows need segment starts beginning at 0, not %v", segs)
	}
	for i, s := range segs {
		e := t
		if i+1 < len(segs) {
			e = segs[i+1]
		}
		if e <= s || e > t {
			return fmt.Errorf("moe: segment %d spans rows %d to %d of %d", i, s, e, t)
		}
		sub := &Work{T: e - s, Routing: Routing{K: k, Experts: w.Routing.Experts[s*k : e*k], Weights: w.Routing.Weights[s*k : e*k]}}
		if err := l.Experts(out[s*h:e*h], sub, x[s*h:e*h], kern, mm, nil); err != nil {
			return fmt.Errorf("segment %d: %w", i, err)
		}
	}
	rec.Record("experts_out", out, t, h)
	return nil
}
