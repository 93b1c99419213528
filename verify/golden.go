package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// WriteGolden writes a test vector built by reference.BuildVector or
// reference.BuildLayerVector to path (atomically, through
// weights.WriteFile), recording shape, the named model shape its widths
// came from, in its metadata as "shape".
func WriteGolden(path string, vec *reference.Vector, shape string, opts weights.WriteOptions) error {
	vec.Meta["shape"] = shape
	return weights.WriteFile(path, vec.Tensors, vec.Meta, opts)
}

// LayerGoldenDims are the dims of a layer-op golden (gdn-layer,
// attention-layer, decoder-layer) of t tokens at cfg's widths; attn picks
// the attention mixer for a decoder-layer (attention-layer always has it).
func LayerGoldenDims(cfg *model.Config, op string, attn bool, t int, dtype string) reference.LayerDims {
	return reference.LayerDims{T: t, H: cfg.HiddenSize, I: cfg.IntermediateSize,
		NK: cfg.LinearNumKeyHeads, NV: cfg.LinearNumValueHeads, DK: cfg.LinearKeyHeadDim, DV: cfg.LinearValueHeadDim, K: cfg.LinearConvKernel,
		NH: cfg.NumHeads, NKV: cfg.NumKVHeads, D: cfg.HeadDim, Rot: cfg.RotaryDim(), Theta: cfg.RopeTheta, Eps: cfg.RMSNormEps,
		Attention: attn || op == "attention-layer", DType: dtype}
}

// ReadTolerance parses the bars of output name from a golden's metadata:
// tol.<name>.rel_l2 and tol.<name>.max_abs_scaled, as reference's vector
// builders write them.
func ReadTolerance(meta map[string]string, name string) (tensor.Tolerance, error) {
	var tol tensor.Tolerance
	for _, f := range []struct {
		key string
		dst *float64
	}{{"rel_l2", &tol.RelL2}, {"max_abs_scaled", &tol.MaxAbsScaled}} {
		key := "tol." + name + "." + f.key
		v, err := strconv.ParseFloat(strings.TrimSpace(meta[key]), 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return tol, fmt.Errorf("metadata %s is %s, not a tolerance (a file from an older qwenref golden? write it again)", key, safeio.Quote(meta[key]))
		}
		// An output of zeros has relative L2 1 and scaled max-abs at most
		// 1: a bar that high passes any kernel, so it checks nothing.
		if v >= 1 {
			return tol, fmt.Errorf("metadata %s is %s: a bar of 1 or more passes an output of zeros, so the file checks nothing", key, safeio.Quote(meta[key]))
		}
		*f.dst = v
	}
	return tol, nil
}

// Golden is a golden file opened for checking: its metadata and tensors.
type Golden struct {
	Meta  map[string]string
	store *weights.Store
}

// OpenGolden opens a file 'qwenref golden' wrote. Close it when done.
func OpenGolden(path string) (*Golden, error) {
	meta, err := ReadMetadata(path)
	if err != nil {
		return nil, err
	}
	st, err := weights.Open(path)
	if err != nil {
		return nil, err
	}
	return &Golden{Meta: meta, store: st}, nil
}

// Close releases the file's memory map.
func (g *Golden) Close() error { return g.store.Close() }

// Output is one output a backend computed from a golden's inputs, named
// as the golden's expected tensor.
type Output struct {
	Name string
	Data []float32
}

// OutputCheck is one output compared with the golden's expected one,
// within the golden's tolerance for it.
type OutputCheck struct {
	Name      string
	Error     tensor.StageError
	Tolerance tensor.Tolerance
	OK        bool
}

// Check runs be on the golden's inputs (Run) and compares every output
// with the expected one (Compare), in the op's output order; on an error
// it returns the checks made before it.
func (g *Golden) Check(be *model.Backend) ([]OutputCheck, error) {
	outs, err := g.Run(be)
	if err != nil {
		return nil, err
	}
	checks := make([]OutputCheck, 0, len(outs))
	for _, o := range outs {
		c, err := g.Compare(o)
		if err != nil {
			return checks, err
		}
		checks = append(checks, c)
	}
	return checks, nil
}

// Compare measures o against the golden's expected tensor of its name,
// within the tolerance the file records for it.
func (g *Golden) Compare(o Output) (OutputCheck, error) {
	want, shape, err := g.store.Float32(o.Name)
	if err != nil {
		return OutputCheck{}, err
	}
	if len(want) != len(o.Data) {
		// A wrong-size expected tensor is a broken file, not a kernel error.
		return OutputCheck{}, fmt.Errorf("expected tensor %s has shape %v (%d values), but the op gives %d values for the file's dims: the golden file is inconsistent",
			o.Name, shape, len(want), len(o.Data))
	}
	tol, err := ReadTolerance(g.Meta, o.Name)
	if err != nil {
		return OutputCheck{}, err
	}
	e := tensor.CompareStage(o.Data, want)
	return OutputCheck{Name: o.Name, Error: e, Tolerance: tol, OK: e.Within(tol)}, nil
}

// Run runs be's kernel for the golden's op (gdn-core: the delta part,
// conv: conv, attention: attn; the layer ops run qwenref's layer on every
// part of be) on its inputs and returns the outputs: out or y, and
// final_state for the stateful ops. Every dimension comes from the
// metadata and is checked against the tensors' shapes first.
func (g *Golden) Run(be *model.Backend) ([]Output, error) {
	meta, st := g.Meta, g.store
	dims := map[string]int{}
	dim := func(keys ...string) error {
		for _, k := range keys {
			// Every dimension is at least 1, as golden writes them: a file of
			// zero tokens or heads would "agree" without checking a value.
			v, err := strconv.Atoi(meta[k])
			if err != nil || v < 1 || v > 1<<30 {
				return fmt.Errorf("metadata %s is %s, not a dimension (1 to %d)", k, safeio.Quote(meta[k]), 1<<30)
			}
			dims[k] = v
		}
		return nil
	}
	read := func(name string, shape ...int) ([]float32, error) {
		info, ok := st.Info(name)
		if !ok {
			return nil, fmt.Errorf("no tensor %s", name)
		}
		if !slices.Equal(info.Shape, shape) {
			return nil, fmt.Errorf("tensor %s has shape %v, the metadata says %v", name, info.Shape, shape)
		}
		x, _, err := st.Float32(name)
		return x, err
	}
	switch op := meta["op"]; op {
	case "gdn-core":
		if err := dim("T", "NK", "NV", "DK", "DV"); err != nil {
			return nil, err
		}
		d := gateddelta.Dims{T: dims["T"], NK: dims["NK"], NV: dims["NV"], DK: dims["DK"], DV: dims["DV"]}
		if d.NK == 0 || d.NV%d.NK != 0 {
			return nil, fmt.Errorf("metadata NV=%d is not a multiple of NK=%d", d.NV, d.NK)
		}
		segs := []int{d.T}
		stShape := []int{d.NV, d.DK, d.DV}
		if cu := meta["cu_seqlens"]; cu != "" {
			var err error
			if segs, err = ParseCuSeqlens(cu, d.T); err != nil {
				return nil, err
			}
			stShape = append([]int{len(segs)}, stShape...)
		}
		var in [6][]float32
		for i, t := range []struct {
			name  string
			shape []int
		}{{"q", []int{d.T, d.NK, d.DK}}, {"k", []int{d.T, d.NK, d.DK}}, {"v", []int{d.T, d.NV, d.DV}},
			{"g", []int{d.T, d.NV}}, {"beta", []int{d.T, d.NV}}, {"initial_state", stShape}} {
			x, err := read(t.name, t.shape...)
			if err != nil {
				return nil, err
			}
			in[i] = x
		}
		if meta["l2norm"] == "1" { // a --grad --l2norm file: q and k raw, normalised in the op
			in[0], in[1] = l2Prep(in[0], d.DK, float32(1/math.Sqrt(float64(d.DK)))), l2Prep(in[1], d.DK, 1)
		}
		out := make([]float32, d.T*d.NV*d.DV)
		if err := reference.PackedRun(be.Delta, out, in[0], in[1], in[2], in[3], in[4], d, segs, in[5]); err != nil {
			return nil, err
		}
		return []Output{{"out", out}, {"final_state", in[5]}}, nil
	case "conv":
		if err := dim("T", "C", "K"); err != nil {
			return nil, err
		}
		t, c, k := dims["T"], dims["C"], dims["K"]
		x, err := read("x", t, c)
		if err != nil {
			return nil, err
		}
		w, err := read("weight", c, k)
		if err != nil {
			return nil, err
		}
		segs, stShape := []int{t}, []int{k, c}
		if cu := meta["cu_seqlens"]; cu != "" { // --grad files: one state per sequence
			if segs, err = ParseCuSeqlens(cu, t); err != nil {
				return nil, err
			}
			stShape = []int{len(segs), k, c}
		}
		state, err := read("initial_state", stShape...)
		if err != nil {
			return nil, err
		}
		y, at := make([]float32, t*c), 0
		for i, n := range segs {
			if err := be.Conv.Forward(y[at*c:(at+n)*c], x[at*c:(at+n)*c], w, conv1d.Dims{T: n, C: c, K: k}, state[i*k*c:(i+1)*k*c]); err != nil {
				return nil, err
			}
			at += n
		}
		if meta["bias"] == "1" { // a --grad --bias file: the backend's conv takes no bias, so y is not run
			return []Output{{"final_state", state}}, nil
		}
		return []Output{{"y", y}, {"final_state", state}}, nil
	case "gated-rmsnorm": // --grad files: the GDN layer's output norm, run by the layer package
		if err := dim("T", "NV", "DV"); err != nil {
			return nil, err
		}
		eps, err := strconv.ParseFloat(meta["eps"], 32)
		if err != nil || !(eps > 0) || eps > 1 {
			return nil, fmt.Errorf("metadata eps is %s, not a number in (0, 1]", safeio.Quote(meta["eps"]))
		}
		sh := []int{dims["T"], dims["NV"], dims["DV"]}
		x, err := read("x", sh...)
		if err != nil {
			return nil, err
		}
		z, err := read("z", sh...)
		if err != nil {
			return nil, err
		}
		w, err := read("weight", dims["DV"])
		if err != nil {
			return nil, err
		}
		y := make([]float32, len(x))
		if err := norm.GatedRMSNormSiLU(y, x, z, w, float32(eps)); err != nil {
			return nil, err
		}
		return []Output{{"y", y}}, nil
	case "attention":
		if err := dim("T", "S", "NH", "NKV", "D"); err != nil {
			return nil, err
		}
		d := attention.Dims{T: dims["T"], S: dims["S"], NH: dims["NH"], NKV: dims["NKV"], D: dims["D"]}
		scale, err := strconv.ParseFloat(meta["scale"], 32)
		if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
			return nil, fmt.Errorf("metadata scale is %s, not a positive number", safeio.Quote(meta["scale"]))
		}
		q, err := read("q", d.T, d.NH, d.D)
		if err != nil {
			return nil, err
		}
		k, err := read("k", d.S, d.NKV, d.D)
		if err != nil {
			return nil, err
		}
		v, err := read("v", d.S, d.NKV, d.D)
		if err != nil {
			return nil, err
		}
		out := make([]float32, d.T*d.NH*d.D)
		if err := be.Attn.Forward(out, q, k, v, d, float32(scale)); err != nil {
			return nil, err
		}
		if meta["gate"] == "1" { // --grad files: the layer's sigmoid gate on the output
			gate, err := read("gate", d.T, d.NH, d.D)
			if err != nil {
				return nil, err
			}
			for i, z := range gate {
				out[i] /= 1 + float32(math.Exp(-float64(z)))
			}
		}
		return []Output{{"out", out}}, nil
	case "gdn-layer", "attention-layer", "decoder-layer":
		d, err := reference.LayerDimsFromMeta(meta)
		if err != nil {
			return nil, err
		}
		out, err := reference.RunLayerVector(op, d, read, reference.LayerKernels{MatMul: be.MatMul, Conv: be.Conv, Delta: be.Delta, Attn: be.Attn})
		if err != nil {
			return nil, err
		}
		return []Output{{"out", out}}, nil
	default:
		return nil, fmt.Errorf("metadata op is %s: not a file 'qwenref golden' wrote (ops: gdn-core, conv, attention, gated-rmsnorm, gdn-layer, attention-layer, decoder-layer)", safeio.Quote(op))
	}
}

// ParseCuSeqlens reads fla's cu_seqlens, "0,37,337,338", into sequence
// lengths, checking that it starts at 0, rises strictly and ends at t.
func ParseCuSeqlens(cu string, t int) ([]int, error) {
	// Counted before it is split: a header may hold 100 MB of commas.
	if n := strings.Count(cu, ",") + 1; n < 2 || n > t+1 {
		return nil, fmt.Errorf("metadata cu_seqlens %q: want 0,…,T with T = %d", shorten(cu, 40), t)
	}
	fields := strings.Split(cu, ",")
	if len(fields) < 2 || len(fields) > t+1 {
		return nil, fmt.Errorf("metadata cu_seqlens %q: want 0,…,T with T = %d", shorten(cu, 40), t)
	}
	var segs []int
	prev := -1
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || (i == 0 && n != 0) || n <= prev || n > t {
			return nil, fmt.Errorf("metadata cu_seqlens %q: want 0,…,T rising, with T = %d", shorten(cu, 40), t)
		}
		if i > 0 {
			segs = append(segs, n-prev)
		}
		prev = n
	}
	if prev != t {
		return nil, fmt.Errorf("metadata cu_seqlens %q ends at %d, not T = %d", shorten(cu, 40), prev, t)
	}
	return segs, nil
}

// shorten cuts s to n bytes and an ellipsis, for messages that quote input.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
