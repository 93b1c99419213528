package attention

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/act"
	"github.com/qwenref/qwenref/tensor"
)

// checkSegments checks the starts of samples packed in t rows: the first
// is 0, each past the one before and below t.
func checkSegments(segs []int, t int) error {
	if len(segs) == 0 || segs[0] != 0 {
		return fmt.Errorf("packed rows need segment starts beginning at 0, not %v", segs)
	}
	for i := 1; i < len(segs); i++ {
		if segs[i] <= segs[i-1] || segs[i] >= t {
			return fmt.Errorf("segment %d starts at row %d: want after %d and below %d", i, segs[i], segs[i-1], t)
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

// PrepSegments is Prep over packed samples: segs are their start rows,
// and each sample's positions restart at 0.
func (l *Layer) PrepSegments(w *Work, segs []int, rec tensor.Recorder) error {
	if err := checkSegments(segs, w.T); err != nil {
		return fmt.Errorf("attention prep: %w", err)
	}
	start := make([]int, w.T) // each row's sample start
	for i, s := range segs {
		for r := s; r < segEnd(segs, i, w.T); r++ {
			start[r] = s
		}
	}
	return l.prep(w, func(i int) int { return i - start[i] }, rec)
}

// CoreSegments is Core over packed samples: each sample attends to its own
// rows alone (causal within it), as a fresh sequence would. cache is left
// holding the last sample's keys and values.
func (l *Layer) CoreSegments(w *Work, cache *Cache, ops Ops, segs []int, rec tensor.Recorder) error {
	d, t := l.Dims, w.T
	if err := checkSegments(segs, t); err != nil {
		return fmt.Errorf("attention core: %w", err)
	}
	qd, kvd := d.NH*d.D, d.NKV*d.D
	w.O = w.buf.Get(t * qd)
	scale := float32(1 / math.Sqrt(float64(d.D)))
	for i, s := range segs {
		e := segEnd(segs, i, t)
		cache.Reset()
		cache.K = append(cache.K, w.K[s*kvd:e*kvd]...)
		cache.V = append(cache.V, w.V[s*kvd:e*kvd]...)
		cache.Len = e - s
		cd := Dims{T: e - s, S: e - s, NH: d.NH, NKV: d.NKV, D: d.D}
		if err := ops.Core.Forward(w.O[s*qd:e*qd], w.Q[s*qd:e*qd], cache.K, cache.V, cd, scale); err != nil {
			return fmt.Errorf("attention core, segment %d: %w", i, err)
		}
	}
	rec.Record("attn_core", w.O, t, d.NH, d.D)
	act.MulSigmoid(w.O, w.O, w.Gate)
	rec.Record("gated", w.O, t, d.NH*d.D)
	return nil
}
