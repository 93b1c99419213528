package reference

import (
	"fmt"
	"strconv"

	"github.com/qwenref/qwenref/layers/attention"
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
	C, K           int // conv
	NH, NKV, D, P  int // attention (P: cached tokens before the T new ones)
}

// Describe is a one-line summary of the dims that matter for op.
func (d VectorDims) Describe(op string) string {
	switch op {
	case "gdn-core":
		return fmt.Sprintf("T=%d nk=%d nv=%d dk=%d dv=%d", d.T, d.NK, d.NV, d.DK, d.DV)
	case "conv":
		return fmt.Sprintf("T=%d C=%d K=%d", d.T, d.C, d.K)
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
	meta := map[string]string{
		"producer":  "qwenref golden",
		"op":        op,
		"seed":      strconv.FormatUint(seed, 10),
		"T":         strconv.Itoa(d.T),
		"reference": "float64, rounded once to float32",
	}
	setInts := func(kv map[string]int) {
		for k, v := range kv {
			meta[k] = strconv.Itoa(v)
		}
	}
	f32 := func(name string, data []float32, shape ...int) weights.NamedTensor {
		return weights.NamedTensor{Name: name, DType: "F32", Shape: shape, Data: data}
	}
	switch op {
	case "gdn-core":
		in, err := NewGDNInputs(seed, gateddelta.Dims{T: d.T, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}, GDNOptions{WithState: !zeroState})
		if err != nil {
			return nil, err
		}
		out, s, err := in.Reference()
		if err != nil {
			return nil, err
		}
		setInts(map[string]int{"NK": d.NK, "NV": d.NV, "DK": d.DK, "DV": d.DV})
		return &Vector{Meta: meta, Tensors: []weights.NamedTensor{
			f32("q", in.Q, d.T, d.NK, d.DK), f32("k", in.K, d.T, d.NK, d.DK), f32("v", in.V, d.T, d.NV, d.DV),
			f32("g", in.G, d.T, d.NV), f32("beta", in.Beta, d.T, d.NV), f32("initial_state", in.State, d.NV, d.DK, d.DV),
			f32("out", Narrow(out), d.T, d.NV, d.DV), f32("final_state", Narrow(s), d.NV, d.DK, d.DV),
		}}, nil

	case "conv":
		in, err := NewConvInputs(seed, d.T, d.C, d.K, !zeroState)
		if err != nil {
			return nil, err
		}
		y, s, err := in.Reference()
		if err != nil {
			return nil, err
		}
		setInts(map[string]int{"C": d.C, "K": d.K})
		return &Vector{Meta: meta, Tensors: []weights.NamedTensor{
			f32("x", in.X, d.T, d.C), f32("weight", in.W, d.C, d.K), f32("initial_state", in.State, d.K, d.C),
			f32("y", Narrow(y), d.T, d.C), f32("final_state", Narrow(s), d.K, d.C),
		}}, nil

	case "attention":
		s := d.P + d.T
		in, err := NewAttentionInputs(seed, attention.Dims{T: d.T, S: s, NH: d.NH, NKV: d.NKV, D: d.D})
		if err != nil {
			return nil, err
		}
		out, err := in.Reference()
		if err != nil {
			return nil, err
		}
		setInts(map[string]int{"S": s, "NH": d.NH, "NKV": d.NKV, "D": d.D})
		// The scale is stored as text with every digit of its float32 value.
		meta["scale"] = strconv.FormatFloat(float64(in.Scale), 'g', -1, 32)
		return &Vector{Meta: meta, Tensors: []weights.NamedTensor{
			f32("q", in.Q, d.T, d.NH, d.D), f32("k", in.K, s, d.NKV, d.D), f32("v", in.V, s, d.NKV, d.D),
			f32("out", Narrow(out), d.T, d.NH, d.D),
		}}, nil
	}
	return nil, fmt.Errorf("unknown op %q (ops: gdn-core, conv, attention)", op)
}
