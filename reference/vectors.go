package reference

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/weights"
)

// VectorOps are the ops a test vector can be written for, in the order
// `qwenref golden` lists them.
var VectorOps = []string{"gdn-core", "conv", "attention"}

// VectorDims are the dimensions of one test vector; which fields matter
// depends on the op.
type VectorDims struct {
	T              int
	NK, NV, DK, DV int // gdn-core
	// SeqLens, for gdn-core, packs several sequences of these lengths
	// (summing to T) in one call, fla's cu_seqlens convention: each starts
	// from its own initial state.
	SeqLens []int
	// DType is the inputs' dtype: "f32" (also when empty), "bf16" or "f16".
	DType         string
	C, K          int // conv
	NH, NKV, D, P int // attention (P: cached tokens before the T new ones)
	// ConvBias gives a conv gradient vector a per-channel bias (input bias,
	// expected gradient dbias), as causal-conv1d takes one.
	ConvBias bool
}

// Describe is a one-line summary of the dims that matter for op.
func (d VectorDims) Describe(op string) string {
	switch op {
	case "gdn-core":
		return fmt.Sprintf("T=%d nk=%d nv=%d dk=%d dv=%d", d.T, d.NK, d.NV, d.DK, d.DV)
	case "conv":
		if d.ConvBias {
			return fmt.Sprintf("T=%d C=%d K=%d with bias", d.T, d.C, d.K)
		}
		return fmt.Sprintf("T=%d C=%d K=%d", d.T, d.C, d.K)
	case "gated-rmsnorm":
		return fmt.Sprintf("T=%d nv=%d dv=%d", d.T, d.NV, d.DV)
	}
	return fmt.Sprintf("T=%d past=%d heads=%d kv-heads=%d head-dim=%d", d.T, d.P, d.NH, d.NKV, d.D)
}

// Vector is one self-contained test vector: the op's inputs, named and laid
// out as its Kernel interface takes them, then the float64 reference
// outputs rounded once to float32, with metadata describing both.
type Vector struct {
	Tensors []weights.NamedTensor
	Meta    map[string]string
}

// BuildVector draws the inputs of op from seed, runs the float64 reference
// on them exactly as stored and returns the vector. zeroState starts the
// stateful ops (gdn-core, conv) from zeros, as a fresh sequence does.
func BuildVector(op string, d VectorDims, seed uint64, zeroState bool) (*Vector, error) {
	dtype := d.DType
	if dtype == "" {
		dtype = "f32"
	}
	meta := map[string]string{
		"producer":  "qwenref golden",
		"op":        op,
		"seed":      strconv.FormatUint(seed, 10),
		"T":         strconv.Itoa(d.T),
		"dtype":     dtype,
		"reference": "float64 from the rounded inputs, rounded once to float32",
	}
	setInts := func(kv map[string]int) {
		for k, v := range kv {
			meta[k] = strconv.Itoa(v)
		}
	}
	round := func(xs ...[]float32) error {
		for _, x := range xs {
			if err := RoundTo(dtype, x); err != nil {
				return err
			}
		}
		return nil
	}
	in := func(name string, data []float32, shape ...int) weights.NamedTensor {
		// bf16 and f16 inputs are stored in their dtype (exact: they are
		// already rounded to it).
		dt := "F32"
		switch dtype {
		case "bf16":
			dt = "BF16"
		case "f16":
			dt = "F16"
		}
		return weights.NamedTensor{Name: name, DType: dt, Shape: shape, Data: data}
	}
	f32 := func(name string, data []float32, shape ...int) weights.NamedTensor {
		return weights.NamedTensor{Name: name, DType: "F32", Shape: shape, Data: data}
	}
	if len(d.SeqLens) > 0 && op != "gdn-core" {
		return nil, fmt.Errorf("--seqlens applies to gdn-core only, not %s", op)
	}
	switch op {
	case "gdn-core":
		segs, err := segments(d.T, d.SeqLens)
		if err != nil {
			return nil, err
		}
		dims := gateddelta.Dims{T: d.T, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
		gin, err := NewGDNInputs(seed, dims, GDNOptions{WithState: !zeroState})
		if err != nil {
			return nil, err
		}
		// One initial state per sequence: the first is the drawn one, the
		// others are drawn from further streams of the same seed.
		sz := d.NV * d.DK * d.DV
		states := slices.Clone(gin.State)
		for i := 1; i < len(segs); i++ {
			extra := make([]float32, sz)
			if !zeroState {
				extra = Normals(Rand(seed, uint64(0xa076_1d64_78bd_642f)+uint64(i)), sz, 0.5)
			}
			states = append(states, extra...)
		}
		if err := round(gin.Q, gin.K, gin.V, gin.G, gin.Beta, states); err != nil {
			return nil, err
		}
		want, wantState, err := packedReference(gin, segs, states)
		if err != nil {
			return nil, err
		}
		outs := []vectorOutput{{"out", want}, {"final_state", wantState}}
		tol, err := measureTolerance(dtype, outs, func(k int) ([][]float32, error) {
			return packedRun(gdnKernels[k], gin, segs, states)
		}, len(gdnKernels))
		if err != nil {
			return nil, err
		}
		tol.set(meta)
		setInts(map[string]int{"NK": d.NK, "NV": d.NV, "DK": d.DK, "DV": d.DV})
		stShape := []int{d.NV, d.DK, d.DV}
		if len(d.SeqLens) > 0 {
			stShape = []int{len(segs), d.NV, d.DK, d.DV}
			meta["cu_seqlens"] = cuSeqlens(segs)
		}
		return &Vector{Meta: meta, Tensors: []weights.NamedTensor{
			in("q", gin.Q, d.T, d.NK, d.DK), in("k", gin.K, d.T, d.NK, d.DK), in("v", gin.V, d.T, d.NV, d.DV),
			in("g", gin.G, d.T, d.NV), in("beta", gin.Beta, d.T, d.NV), in("initial_state", states, stShape...),
			f32("out", Narrow(want), d.T, d.NV, d.DV), f32("final_state", Narrow(wantState), stShape...),
		}}, nil

	case "conv":
		cin, err := NewConvInputs(seed, d.T, d.C, d.K, !zeroState)
		if err != nil {
			return nil, err
		}
		if err := round(cin.X, cin.W, cin.State); err != nil {
			return nil, err
		}
		y, st, err := cin.Reference()
		if err != nil {
			return nil, err
		}
		tol, err := measureTolerance(dtype, []vectorOutput{{"y", y}, {"final_state", st}}, func(k int) ([][]float32, error) {
			out, state := make([]float32, d.T*d.C), slices.Clone(cin.State)
			err := convKernels[k].Forward(out, cin.X, cin.W, conv1d.Dims{T: d.T, C: d.C, K: d.K}, state)
			return [][]float32{out, state}, err
		}, len(convKernels))
		if err != nil {
			return nil, err
		}
		tol.set(meta)
		setInts(map[string]int{"C": d.C, "K": d.K})
		return &Vector{Meta: meta, Tensors: []weights.NamedTensor{
			in("x", cin.X, d.T, d.C), in("weight", cin.W, d.C, d.K), in("initial_state", cin.State, d.K, d.C),
			f32("y", Narrow(y), d.T, d.C), f32("final_state", Narrow(st), d.K, d.C),
		}}, nil

	case "attention":
		s := d.P + d.T
		ain, err := NewAttentionInputs(seed, attention.Dims{T: d.T, S: s, NH: d.NH, NKV: d.NKV, D: d.D})
		if err != nil {
			return nil, err
		}
		if err := round(ain.Q, ain.K, ain.V); err != nil {
			return nil, err
		}
		out, err := ain.Reference()
		if err != nil {
			return nil, err
		}
		tol, err := measureTolerance(dtype, []vectorOutput{{"out", out}}, func(k int) ([][]float32, error) {
			o := make([]float32, d.T*d.NH*d.D)
			err := attnKernels[k].Forward(o, ain.Q, ain.K, ain.V, ain.Dims, ain.Scale)
			return [][]float32{o}, err
		}, len(attnKernels))
		if err != nil {
			return nil, err
		}
		tol.set(meta)
		setInts(map[string]int{"S": s, "NH": d.NH, "NKV": d.NKV, "D": d.D})
		// The scale is stored as text with every digit of its float32 value.
		meta["scale"] = strconv.FormatFloat(float64(ain.Scale), 'g', -1, 32)
		return &Vector{Meta: meta, Tensors: []weights.NamedTensor{
			in("q", ain.Q, d.T, d.NH, d.D), in("k", ain.K, s, d.NKV, d.D), in("v", ain.V, s, d.NKV, d.D),
			f32("out", Narrow(out), d.T, d.NH, d.D),
		}}, nil
	}
	return nil, fmt.Errorf("unknown op %q (ops: gdn-core, conv, attention)", op)
}
