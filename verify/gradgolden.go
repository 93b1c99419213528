package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/reference"
)

// IsGrad reports whether the golden holds gradients (`qwenref golden --grad`).
func (g *Golden) IsGrad() bool { return g.Meta["grad"] == "1" }

// RunGrad runs qwenref's built-in backward on a gradient golden's inputs
// and upstream gradients and returns every input's gradient, named as the
// file's expected ones (dq, dk, …). gdn-core runs the reference's
// recurrence in float32 (reference.NaiveGDNBackward); conv and attention
// run the float64 reference and round once to float32.
func (g *Golden) RunGrad() ([]Output, error) {
	if !g.IsGrad() {
		return nil, fmt.Errorf("the file holds no gradients (write it with qwenref golden --grad)")
	}
	meta := g.Meta
	dims := map[string]int{}
	for _, k := range []string{"T", "NK", "NV", "DK", "DV", "C", "K", "S", "NH", "NKV", "D"} {
		if meta[k] == "" {
			continue
		}
		v, err := strconv.Atoi(meta[k])
		if err != nil || v < 1 || v > 1<<30 {
			return nil, fmt.Errorf("metadata %s is %s, not a dimension (1 to %d)", k, safeio.Quote(meta[k]), 1<<30)
		}
		dims[k] = v
	}
	read := func(name string, shape ...int) ([]float32, error) {
		info, ok := g.store.Info(name)
		if !ok {
			return nil, fmt.Errorf("no tensor %s", name)
		}
		if !slices.Equal(info.Shape, shape) {
			return nil, fmt.Errorf("tensor %s has shape %v, the metadata says %v", name, info.Shape, shape)
		}
		x, _, err := g.store.Float32(name)
		return x, err
	}
	readAll := func(ts ...namedShape) ([][]float32, error) {
		out := make([][]float32, len(ts))
		for i, t := range ts {
			x, err := read(t.name, t.shape...)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	}
	t := dims["T"]
	segs := []int{t}
	if cu := meta["cu_seqlens"]; cu != "" {
		var err error
		if segs, err = ParseCuSeqlens(cu, t); err != nil {
			return nil, err
		}
	}
	stShape := func(s ...int) []int {
		if meta["cu_seqlens"] != "" {
			return append([]int{len(segs)}, s...)
		}
		return s
	}
	wide := func(xs [][]float32) [][]float64 {
		out := make([][]float64, len(xs))
		for i, x := range xs {
			out[i] = reference.Widen(x)
		}
		return out
	}
	switch op := meta["op"]; op {
	case "gdn-core":
		d := gateddelta.Dims{T: t, NK: dims["NK"], NV: dims["NV"], DK: dims["DK"], DV: dims["DV"]}
		if d.NK == 0 || d.NV%d.NK != 0 {
			return nil, fmt.Errorf("metadata NV=%d is not a multiple of NK=%d", d.NV, d.NK)
		}
		in, err := readAll(namedShape{"q", []int{t, d.NK, d.DK}}, namedShape{"k", []int{t, d.NK, d.DK}}, namedShape{"v", []int{t, d.NV, d.DV}},
			namedShape{"g", []int{t, d.NV}}, namedShape{"beta", []int{t, d.NV}}, namedShape{"initial_state", stShape(d.NV, d.DK, d.DV)},
			namedShape{"dout", []int{t, d.NV, d.DV}}, namedShape{"dfinal_state", stShape(d.NV, d.DK, d.DV)})
		if err != nil {
			return nil, err
		}
		r, err := reference.NaiveGDNBackward(in[0], in[1], in[2], in[3], in[4], d, segs, in[5], in[6], in[7], meta["l2norm"] == "1")
		if err != nil {
			return nil, err
		}
		return []Output{{"dq", r[0]}, {"dk", r[1]}, {"dv", r[2]}, {"dg", r[3]}, {"dbeta", r[4]}, {"dinitial_state", r[5]}}, nil
	case "conv":
		c, k := dims["C"], dims["K"]
		in, err := readAll(namedShape{"x", []int{t, c}}, namedShape{"weight", []int{c, k}}, namedShape{"initial_state", stShape(k, c)},
			namedShape{"dy", []int{t, c}}, namedShape{"dfinal_state", stShape(k, c)})
		if err != nil {
			return nil, err
		}
		w := wide(in)
		_, _, gr, err := reference.ConvPackedBackward(w[0], t, c, w[1], k, segs, w[2], w[3], w[4])
		if err != nil {
			return nil, err
		}
		return []Output{{"dx", reference.Narrow(gr.X)}, {"dweight", reference.Narrow(gr.W)}, {"dinitial_state", reference.Narrow(gr.State)}}, nil
	case "attention":
		d := attention.Dims{T: t, S: dims["S"], NH: dims["NH"], NKV: dims["NKV"], D: dims["D"]}
		scale, err := strconv.ParseFloat(meta["scale"], 32)
		if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
			return nil, fmt.Errorf("metadata scale is %s, not a positive number", safeio.Quote(meta["scale"]))
		}
		in, err := readAll(namedShape{"q", []int{t, d.NH, d.D}}, namedShape{"k", []int{d.S, d.NKV, d.D}}, namedShape{"v", []int{d.S, d.NKV, d.D}},
			namedShape{"gate", []int{t, d.NH, d.D}}, namedShape{"dout", []int{t, d.NH, d.D}})
		if err != nil {
			return nil, err
		}
		w := wide(in)
		gr, err := reference.GatedAttentionBackward(w[0], w[1], w[2], w[3], d, scale, w[4])
		if err != nil {
			return nil, err
		}
		return []Output{{"dq", reference.Narrow(gr.Q)}, {"dk", reference.Narrow(gr.K)}, {"dv", reference.Narrow(gr.V)}, {"dgate", reference.Narrow(gr.Gate)}}, nil
	default:
		return nil, fmt.Errorf("metadata op is %s: gradient files exist for gdn-core, conv and attention", safeio.Quote(op))
	}
}

type namedShape struct {
	name  string
	shape []int
}

// l2Prep is q or k as a --l2norm file's op reads them: x/√(Σx²+1e-6)·s
// per row of dim values, in a new slice.
func l2Prep(x []float32, dim int, s float32) []float32 {
	y := make([]float32, len(x))
	if norm.L2Normalize(y, x, dim, 1e-6) != nil {
		return x // the shapes were checked; the kernel will name a mismatch
	}
	for i := range y {
		y[i] *= s
	}
	return y
}
