package reference

import (
	"fmt"
	"math"
	"strconv"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// LayerVectorOps are the layer-level ops a test vector can be written for.
var LayerVectorOps = []string{"gdn-layer", "attention-layer", "decoder-layer"}

// LayerDims are the dims of a layer-level vector: the model's widths.
type LayerDims struct {
	T, H, I           int
	NK, NV, DK, DV, K int // Gated DeltaNet mixer
	NH, NKV, D, Rot   int // attention mixer
	Theta, Eps        float64
	Attention         bool // decoder-layer: an attention layer instead of a Gated DeltaNet one
	DType             string
}

// LayerKernels are the kernels a layer-level vector runs on.
type LayerKernels struct {
	MatMul linalg.MatMuler
	Conv   conv1d.Kernel
	Delta  gateddelta.Kernel
	Attn   attention.Kernel
}

// layerTensor names one weight of a layer vector (checkpoint names,
// without the "layers.N." prefix) and its shape.
type layerTensor struct {
	name  string
	shape []int
}

// layerTensors lists the weights op stores for d, in file order.
func layerTensors(op string, d LayerDims) []layerTensor {
	c, hv, qd, kvd := 2*d.NK*d.DK+d.NV*d.DV, d.NV*d.DV, d.NH*d.D, d.NKV*d.D
	gdn := []layerTensor{{"linear_attn.in_proj_qkv.weight", []int{c, d.H}}, {"linear_attn.in_proj_z.weight", []int{hv, d.H}},
		{"linear_attn.in_proj_b.weight", []int{d.NV, d.H}}, {"linear_attn.in_proj_a.weight", []int{d.NV, d.H}},
		{"linear_attn.conv1d.weight", []int{c, d.K}}, {"linear_attn.A_log", []int{d.NV}}, {"linear_attn.dt_bias", []int{d.NV}},
		{"linear_attn.norm.weight", []int{d.DV}}, {"linear_attn.out_proj.weight", []int{d.H, hv}}}
	attn := []layerTensor{{"self_attn.q_proj.weight", []int{2 * qd, d.H}}, {"self_attn.k_proj.weight", []int{kvd, d.H}},
		{"self_attn.v_proj.weight", []int{kvd, d.H}}, {"self_attn.o_proj.weight", []int{d.H, qd}},
		{"self_attn.q_norm.weight", []int{d.D}}, {"self_attn.k_norm.weight", []int{d.D}}}
	block := []layerTensor{{"input_layernorm.weight", []int{d.H}}, {"post_attention_layernorm.weight", []int{d.H}},
		{"mlp.gate_proj.weight", []int{d.I, d.H}}, {"mlp.up_proj.weight", []int{d.I, d.H}}, {"mlp.down_proj.weight", []int{d.H, d.I}}}
	switch {
	case op == "gdn-layer":
		return gdn
	case op == "attention-layer":
		return attn
	case d.Attention:
		return append(attn, block...)
	}
	return append(gdn, block...)
}

// drawLayerWeight draws one weight: projections N(0, 1/fan_in) so the
// activations stay O(1); norms near their identity; A_log and dt_bias in
// the ranges Qwen's checkpoints hold.
func drawLayerWeight(seed uint64, lt layerTensor) []float32 {
	n := 1
	for _, s := range lt.shape {
		n *= s
	}
	r := Rand(seed, StreamFor(lt.name))
	switch lt.name {
	case "linear_attn.A_log":
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Log(1 + 15*r.Float64()))
		}
		return x
	case "linear_attn.dt_bias", "self_attn.q_norm.weight", "self_attn.k_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight":
		return Normals(r, n, 0.1)
	case "linear_attn.norm.weight":
		x := Normals(r, n, 0.1)
		for i := range x {
			x[i]++
		}
		return x
	case "linear_attn.conv1d.weight":
		return Normals(r, n, 0.5)
	}
	return Normals(r, n, 1/math.Sqrt(float64(lt.shape[len(lt.shape)-1])))
}

// checkLayerDims refuses dims a layer vector cannot be built for, before
// anything is allocated.
func checkLayerDims(op string, d LayerDims) error {
	const maxElems = 1 << 28
	gdnOK := d.NK > 0 && d.NV > 0 && d.NV%d.NK == 0 && d.DK > 0 && d.DV > 0 && d.K > 0 && fits(maxElems, 2*d.NK*d.DK+d.NV*d.DV, d.H)
	attnOK := d.NH > 0 && d.NKV > 0 && d.NH%d.NKV == 0 && d.D > 0 && d.Rot >= 0 && d.Rot <= d.D && d.Rot%2 == 0 && fits(maxElems, 2*d.NH*d.D, d.H)
	ok := d.T >= 1 && d.H > 0 && fits(maxElems, d.T, d.H)
	switch {
	case op == "gdn-layer":
		ok = ok && gdnOK
	case op == "attention-layer":
		ok = ok && attnOK
	default:
		ok = ok && d.I > 0 && fits(maxElems, d.I, d.H) && ((d.Attention && attnOK) || (!d.Attention && gdnOK))
	}
	if !ok {
		return fmt.Errorf("%s: bad dims %+v", op, d)
	}
	return nil
}

// BuildLayerVector draws a layer's weights and input x [T, H] from seed,
// rounds them to d.DType, and stores the float64 reference output. For
// gdn-layer and attention-layer x is the mixer's (already normed) input
// and out its output; for decoder-layer x is the residual stream.
func BuildLayerVector(op string, d LayerDims, seed uint64) (*Vector, error) {
	if d.DType == "" {
		d.DType = "f32"
	}
	if err := checkLayerDims(op, d); err != nil {
		return nil, err
	}
	get := map[string][]float32{}
	var ts []weights.NamedTensor
	store := func(name string, data []float32, shape []int) {
		dt := "F32"
		if d.DType == "bf16" {
			dt = "BF16"
		}
		get[name] = data
		ts = append(ts, weights.NamedTensor{Name: name, DType: dt, Shape: shape, Data: data})
	}
	x := Normals(Rand(seed, StreamFor("x")), d.T*d.H, 1)
	if err := RoundTo(d.DType, x); err != nil {
		return nil, err
	}
	store("x", x, []int{d.T, d.H})
	for _, lt := range layerTensors(op, d) {
		w := drawLayerWeight(seed, lt)
		if err := RoundTo(d.DType, w); err != nil {
			return nil, err
		}
		store(lt.name, w, lt.shape)
	}
	want, err := layerReference(op, d, get)
	if err != nil {
		return nil, err
	}
	lookup := func(name string, _ ...int) ([]float32, error) { return get[name], nil }
	kernels := []LayerKernels{
		{linalg.Naive{}, conv1d.Naive{}, gateddelta.Naive{}, attention.Naive{}},
		{linalg.Blocked{}, conv1d.Chunked{}, gateddelta.Chunked{}, attention.Chunked{}},
	}
	tol, err := measureTolerance(d.DType, []vectorOutput{{"out", want}}, func(k int) ([][]float32, error) {
		out, err := RunLayerVector(op, d, lookup, kernels[k])
		return [][]float32{out}, err
	}, len(kernels))
	if err != nil {
		return nil, err
	}
	meta := map[string]string{"producer": "qwenref golden", "op": op, "seed": strconv.FormatUint(seed, 10), "dtype": d.DType,
		"reference": "float64 from the rounded inputs and weights, rounded once to float32",
		"eps":       strconv.FormatFloat(d.Eps, 'g', -1, 64), "theta": strconv.FormatFloat(d.Theta, 'g', -1, 64)}
	for k, v := range map[string]int{"T": d.T, "H": d.H, "I": d.I, "NK": d.NK, "NV": d.NV, "DK": d.DK, "DV": d.DV, "K": d.K,
		"NH": d.NH, "NKV": d.NKV, "D": d.D, "rotary_dim": d.Rot} {
		meta[k] = strconv.Itoa(v)
	}
	if op == "decoder-layer" {
		meta["layer_type"] = "linear_attention"
		if d.Attention {
			meta["layer_type"] = "full_attention"
		}
	}
	tol.set(meta)
	ts = append(ts, weights.NamedTensor{Name: "out", DType: "F32", Shape: []int{d.T, d.H}, Data: Narrow(want)})
	return &Vector{Tensors: ts, Meta: meta}, nil
}

// layerReference runs the float64 layer on the stored tensors.
func layerReference(op string, d LayerDims, t map[string][]float32) ([]float64, error) {
	w := func(name string) []float64 { return Widen(t[name]) }
	gdn := func() *GDNMixerParams {
		return &GDNMixerParams{H: d.H, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV, K: d.K, Eps: d.Eps,
			QKV: w("linear_attn.in_proj_qkv.weight"), Z: w("linear_attn.in_proj_z.weight"), B: w("linear_attn.in_proj_b.weight"),
			A: w("linear_attn.in_proj_a.weight"), Conv: w("linear_attn.conv1d.weight"), ALog: w("linear_attn.A_log"),
			DtBias: w("linear_attn.dt_bias"), Norm: w("linear_attn.norm.weight"), Out: w("linear_attn.out_proj.weight")}
	}
	attn := func() *AttentionMixerParams {
		return &AttentionMixerParams{H: d.H, NH: d.NH, NKV: d.NKV, D: d.D, Rot: d.Rot, Theta: d.Theta, Eps: d.Eps,
			Q: w("self_attn.q_proj.weight"), K: w("self_attn.k_proj.weight"), V: w("self_attn.v_proj.weight"),
			O: w("self_attn.o_proj.weight"), QNorm: w("self_attn.q_norm.weight"), KNorm: w("self_attn.k_norm.weight")}
	}
	var out []float64
	var err error
	switch op {
	case "gdn-layer":
		out, _, err = GDNMixer(w("x"), d.T, gdn())
	case "attention-layer":
		out, _, err = AttentionMixer(w("x"), d.T, attn())
	default:
		p := &DecoderParams{H: d.H, I: d.I, Eps: d.Eps, InputNorm: w("input_layernorm.weight"), PostNorm: w("post_attention_layernorm.weight"),
			Gate: w("mlp.gate_proj.weight"), Up: w("mlp.up_proj.weight"), Down: w("mlp.down_proj.weight")}
		if d.Attention {
			p.Attn = attn()
		} else {
			p.GDN = gdn()
		}
		out, _, err = DecoderLayer(w("x"), d.T, p)
	}
	return out, err
}

// RunLayerVector runs a layer-level vector's op with qwenref's layers on
// kernels k. get returns a stored tensor, checked against the shape given.
func RunLayerVector(op string, d LayerDims, get func(name string, shape ...int) ([]float32, error), k LayerKernels) ([]float32, error) {
	if err := checkLayerDims(op, d); err != nil {
		return nil, err
	}
	w := map[string][]float32{}
	for _, lt := range append([]layerTensor{{"x", []int{d.T, d.H}}}, layerTensors(op, d)...) {
		x, err := get(lt.name, lt.shape...)
		if err != nil {
			return nil, err
		}
		w[lt.name] = x
	}
	mat := func(name string, rows, cols int) *tensor.Matrix {
		return &tensor.Matrix{Rows: rows, Cols: cols, F32: w[name]}
	}
	c, hv, qd, kvd := 2*d.NK*d.DK+d.NV*d.DV, d.NV*d.DV, d.NH*d.D, d.NKV*d.D
	mix := func(out, x []float32, attn bool) error {
		if attn {
			l := attention.Layer{Dims: attention.LayerDims{Hidden: d.H, NH: d.NH, NKV: d.NKV, D: d.D, RotaryDim: d.Rot, Theta: d.Theta, Eps: float32(d.Eps)},
				W: attention.LayerWeights{QProj: mat("self_attn.q_proj.weight", 2*qd, d.H), KProj: mat("self_attn.k_proj.weight", kvd, d.H),
					VProj: mat("self_attn.v_proj.weight", kvd, d.H), OProj: mat("self_attn.o_proj.weight", d.H, qd),
					QNorm: w["self_attn.q_norm.weight"], KNorm: w["self_attn.k_norm.weight"]}}
			return l.Forward(out, x, d.T, &attention.Cache{}, attention.Ops{MatMul: k.MatMul, Core: k.Attn}, nil)
		}
		ld := gateddelta.LayerDims{Hidden: d.H, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV, ConvK: d.K, Eps: float32(d.Eps)}
		l := gateddelta.Layer{Dims: ld, W: gateddelta.LayerWeights{InProjQKV: mat("linear_attn.in_proj_qkv.weight", c, d.H),
			InProjZ: mat("linear_attn.in_proj_z.weight", hv, d.H), InProjB: mat("linear_attn.in_proj_b.weight", d.NV, d.H),
			InProjA: mat("linear_attn.in_proj_a.weight", d.NV, d.H), OutProj: mat("linear_attn.out_proj.weight", d.H, hv),
			ConvW: w["linear_attn.conv1d.weight"], ALog: w["linear_attn.A_log"], DtBias: w["linear_attn.dt_bias"], NormW: w["linear_attn.norm.weight"]}}
		return l.Forward(out, x, d.T, gateddelta.NewState(ld), gateddelta.Ops{MatMul: k.MatMul, Conv: k.Conv, Core: k.Delta}, nil)
	}
	out := make([]float32, d.T*d.H)
	if op != "decoder-layer" {
		return out, mix(out, w["x"], op == "attention-layer")
	}
	// h = x + Mixer(RMSNorm₁₊(x)); out = h + MLP(RMSNorm₁₊(h)).
	eps := float32(d.Eps)
	normed := make([]float32, d.T*d.H)
	if err := norm.RMSNormOnePlus(normed, w["x"], w["input_layernorm.weight"], eps); err != nil {
		return nil, err
	}
	if err := mix(out, normed, d.Attention); err != nil {
		return nil, err
	}
	for i, v := range w["x"] {
		out[i] += v
	}
	if err := norm.RMSNormOnePlus(normed, out, w["post_attention_layernorm.weight"], eps); err != nil {
		return nil, err
	}
	g, u := make([]float32, d.T*d.I), make([]float32, d.T*d.I)
	if err := k.MatMul.MatMulT(g, normed, d.T, mat("mlp.gate_proj.weight", d.I, d.H)); err != nil {
		return nil, err
	}
	if err := k.MatMul.MatMulT(u, normed, d.T, mat("mlp.up_proj.weight", d.I, d.H)); err != nil {
		return nil, err
	}
	for i := range g {
		g[i] = float32(SiLU(float64(g[i]))) * u[i]
	}
	down := make([]float32, d.T*d.H)
	if err := k.MatMul.MatMulT(down, g, d.T, mat("mlp.down_proj.weight", d.H, d.I)); err != nil {
		return nil, err
	}
	for i := range out {
		out[i] += down[i]
	}
	return out, nil
}

// LayerDimsFromMeta reads a layer vector's dims back from its metadata.
func LayerDimsFromMeta(meta map[string]string) (LayerDims, error) {
	var d LayerDims
	ints := map[string]*int{"T": &d.T, "H": &d.H, "I": &d.I, "NK": &d.NK, "NV": &d.NV, "DK": &d.DK, "DV": &d.DV, "K": &d.K,
		"NH": &d.NH, "NKV": &d.NKV, "D": &d.D, "rotary_dim": &d.Rot}
	for k, p := range ints {
		v, err := strconv.Atoi(meta[k])
		if err != nil || v < 0 || v > 1<<28 {
			return d, fmt.Errorf("metadata %s is %q, not a dimension", k, meta[k])
		}
		*p = v
	}
	for k, p := range map[string]*float64{"eps": &d.Eps, "theta": &d.Theta} {
		v, err := strconv.ParseFloat(meta[k], 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return d, fmt.Errorf("metadata %s is %q, not a positive number", k, meta[k])
		}
		*p = v
	}
	d.Attention = meta["layer_type"] == "full_attention"
	d.DType = meta["dtype"]
	return d, nil
}
