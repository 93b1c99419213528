package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/reference"
)

// IsGrad reports whether the golden holds gradients (`qwenref golden --grad`).
func (g *Golden) IsGrad() bool { return g.Meta["grad"] == "1" }

// Backward is a set of float32 backward kernels, one sequence per call,
// that `qwenref check --grad` runs on a gradient golden: qwenref's own
// (NaiveBackward) or a plug-in's (plugin.BackwardOf). Each writes every
// gradient in full; an optional upstream gradient (dfinal) or input (bias,
// gate) may be nil, and then its gradient is not written. A set that
// lacks an op returns an error saying so.
type Backward interface {
	GDNBackward(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal []float32, d gateddelta.Dims) error
	ConvBackward(dx, dw, dbias, dstate, x, w, bias, state, dy, dfinal []float32, d conv1d.Dims) error
	AttentionBackward(dq, dk, dv, dgate, q, k, v, gate, dout []float32, d attention.Dims, scale float32) error
	GatedRMSNormBackward(dx, dz, dw, x, z, w, dy []float32, dim int, eps float32) error
}

// NaiveBackward is qwenref's built-in backward: package reference's
// float32 loops (GDNBackwardF32, ConvBackwardF32, AttentionBackwardF32,
// GatedRMSNormBackwardF32), written from the math in float32.
type NaiveBackward struct{}

// String names the backward in a check's report.
func (NaiveBackward) String() string { return "qwenref's float32 backward" }

// GDNBackward runs reference.GDNBackwardF32.
func (NaiveBackward) GDNBackward(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal []float32, d gateddelta.Dims) error {
	return reference.GDNBackwardF32(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal, d)
}

// ConvBackward runs reference.ConvBackwardF32.
func (NaiveBackward) ConvBackward(dx, dw, dbias, dstate, x, w, bias, state, dy, dfinal []float32, d conv1d.Dims) error {
	return reference.ConvBackwardF32(dx, dw, dbias, dstate, x, d.T, d.C, w, d.K, bias, state, dy, dfinal)
}

// AttentionBackward runs reference.AttentionBackwardF32.
func (NaiveBackward) AttentionBackward(dq, dk, dv, dgate, q, k, v, gate, dout []float32, d attention.Dims, scale float32) error {
	return reference.AttentionBackwardF32(dq, dk, dv, dgate, q, k, v, gate, dout, d, scale)
}

// GatedRMSNormBackward runs reference.GatedRMSNormBackwardF32.
func (NaiveBackward) GatedRMSNormBackward(dx, dz, dw, x, z, w, dy []float32, dim int, eps float32) error {
	return reference.GatedRMSNormBackwardF32(dx, dz, dw, x, z, w, dy, dim, eps)
}

// RunGrad runs bw (nil: NaiveBackward) on a gradient golden's inputs and
// upstream gradients, one sequence per call, and returns every input's
// gradient, named as the file's expected ones (dq, dk, …). A gdn-core
// --l2norm file's q and k are normalised here and the norm's backward
// runs here; packed conv sequences' dweight and dbias are summed here.
func (g *Golden) RunGrad(bw Backward) ([]Output, error) {
	if !g.IsGrad() {
		return nil, fmt.Errorf("the file holds no gradients (write it with qwenref golden --grad)")
	}
	if bw == nil {
		bw = NaiveBackward{}
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
		r, err := reference.PackedGDNBackward(bw.GDNBackward, in[0], in[1], in[2], in[3], in[4], d, segs, in[5], in[6], in[7], meta["l2norm"] == "1")
		if err != nil {
			return nil, err
		}
		return []Output{{"dq", r[0]}, {"dk", r[1]}, {"dv", r[2]}, {"dg", r[3]}, {"dbeta", r[4]}, {"dinitial_state", r[5]}}, nil
	case "conv":
		return g.runConvGrad(bw, read, t, dims["C"], dims["K"], segs, stShape)
	case "attention":
		d := attention.Dims{T: t, S: dims["S"], NH: dims["NH"], NKV: dims["NKV"], D: dims["D"]}
		scale, err := strconv.ParseFloat(meta["scale"], 32)
		if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
			return nil, fmt.Errorf("metadata scale is %s, not a positive number", safeio.Quote(meta["scale"]))
		}
		if d.NKV == 0 || d.NH%d.NKV != 0 || d.S < d.T {
			return nil, fmt.Errorf("metadata NH=%d, NKV=%d, S=%d, T=%d: want NH a multiple of NKV and S ≥ T", d.NH, d.NKV, d.S, d.T)
		}
		in, err := readAll(namedShape{"q", []int{t, d.NH, d.D}}, namedShape{"k", []int{d.S, d.NKV, d.D}}, namedShape{"v", []int{d.S, d.NKV, d.D}},
			namedShape{"gate", []int{t, d.NH, d.D}}, namedShape{"dout", []int{t, d.NH, d.D}})
		if err != nil {
			return nil, err
		}
		gr := [4][]float32{make([]float32, len(in[0])), make([]float32, len(in[1])), make([]float32, len(in[2])), make([]float32, len(in[0]))}
		if err := bw.AttentionBackward(gr[0], gr[1], gr[2], gr[3], in[0], in[1], in[2], in[3], in[4], d, float32(scale)); err != nil {
			return nil, err
		}
		return []Output{{"dq", gr[0]}, {"dk", gr[1]}, {"dv", gr[2]}, {"dgate", gr[3]}}, nil
	case "gated-rmsnorm":
		nv, dv := dims["NV"], dims["DV"]
		eps, err := strconv.ParseFloat(meta["eps"], 32)
		if err != nil || !(eps > 0) || eps > 1 {
			return nil, fmt.Errorf("metadata eps is %s, not a number in (0, 1]", safeio.Quote(meta["eps"]))
		}
		in, err := readAll(namedShape{"x", []int{t, nv, dv}}, namedShape{"z", []int{t, nv, dv}}, namedShape{"weight", []int{dv}},
			namedShape{"dy", []int{t, nv, dv}})
		if err != nil {
			return nil, err
		}
		dx, dz, dw := make([]float32, len(in[0])), make([]float32, len(in[0])), make([]float32, dv)
		if err := bw.GatedRMSNormBackward(dx, dz, dw, in[0], in[1], in[2], in[3], dv, float32(eps)); err != nil {
			return nil, err
		}
		return []Output{{"dx", dx}, {"dz", dz}, {"dweight", dw}}, nil
	default:
		return nil, fmt.Errorf("metadata op is %s: gradient files exist for gdn-core, conv, attention and gated-rmsnorm", safeio.Quote(op))
	}
}

// runConvGrad runs bw's conv backward per packed sequence, summing
// dweight (and dbias, in a --bias file) over the sequences.
func (g *Golden) runConvGrad(bw Backward, read func(string, ...int) ([]float32, error), t, c, k int, segs []int, stShape func(...int) []int) ([]Output, error) {
	var in [5][]float32
	for i, n := range []namedShape{{"x", []int{t, c}}, {"weight", []int{c, k}}, {"initial_state", stShape(k, c)}, {"dy", []int{t, c}}, {"dfinal_state", stShape(k, c)}} {
		x, err := read(n.name, n.shape...)
		if err != nil {
			return nil, err
		}
		in[i] = x
	}
	var bias, dbias, db []float32
	if g.Meta["bias"] == "1" {
		var err error
		if bias, err = read("bias", c); err != nil {
			return nil, err
		}
		dbias, db = make([]float32, c), make([]float32, c)
	}
	dx, dw, dst := make([]float32, t*c), make([]float32, c*k), make([]float32, len(in[2]))
	dws := make([]float32, c*k)
	at, sz := 0, k*c
	for i, n := range segs {
		sl := func(x []float32) []float32 { return x[at*c : (at+n)*c] }
		if err := bw.ConvBackward(sl(dx), dws, db, dst[i*sz:(i+1)*sz], sl(in[0]), in[1], bias, in[2][i*sz:(i+1)*sz], sl(in[3]), in[4][i*sz:(i+1)*sz],
			conv1d.Dims{T: n, C: c, K: k}); err != nil {
			return nil, err
		}
		for j, v := range dws {
			dw[j] += v
		}
		for j, v := range db {
			dbias[j] += v
		}
		at += n
	}
	out := []Output{{"dx", dx}, {"dweight", dw}, {"dinitial_state", dst}}
	if bias != nil {
		out = append(out, Output{"dbias", dbias})
	}
	return out, nil
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
