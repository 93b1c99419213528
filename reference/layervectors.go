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

// layerWeights are a layer vector's weights, named as a checkpoint names
// them under `layers.N.` (the mixers' names come from their own tags).
// Which parts are set depends on the op; the block's own tensors are walked
// only for decoder-layer.
type layerWeights struct {
	Attn      *attention.LayerWeights  `tensor:"self_attn."`
	GDN       *gateddelta.LayerWeights `tensor:"linear_attn."`
	InputNorm []float32                `tensor:"input_layernorm.weight" shape:"H" init:"zero_centred" when:"block"`
	PostNorm  []float32                `tensor:"post_attention_layernorm.weight" shape:"H" init:"zero_centred" when:"block"`
	MLP       *swiGLU                  `tensor:"mlp."`
}

// swiGLU is the decoder layer's MLP.
type swiGLU struct {
	Gate *tensor.Matrix `tensor:"gate_proj.weight" shape:"I,H"`
	Up   *tensor.Matrix `tensor:"up_proj.weight" shape:"I,H"`
	Down *tensor.Matrix `tensor:"down_proj.weight" shape:"H,I"`
}

// newLayerWeights is op's empty weight set and the sizes its tags use.
func newLayerWeights(op string, d LayerDims) (*layerWeights, weights.Sizes) {
	s := weights.Sizes{"H": d.H, "I": d.I, "C": 2*d.NK*d.DK + d.NV*d.DV, "K": d.K, "n_k": d.NK, "d_k": d.DK,
		"n_v": d.NV, "d_v": d.DV, "n_h": d.NH, "n_kv": d.NKV, "d_h": d.D, "separate_in_proj": 1}
	w := &layerWeights{}
	attn := op == "attention-layer" || (op == "decoder-layer" && d.Attention)
	if attn {
		w.Attn = &attention.LayerWeights{}
	} else if op != "attention-layer" {
		w.GDN = &gateddelta.LayerWeights{}
	}
	if op == "decoder-layer" {
		w.MLP = &swiGLU{}
		s["block"] = 1
	}
	return w, s
}

// fileShape is how a layer vector stores a tensor: a conv's [C, 1, K] as
// [C, K].
func fileShape(shape []int) []int {
	if len(shape) == 3 && shape[1] == 1 {
		return []int{shape[0], shape[2]}
	}
	return shape
}

// bindLayerWeights fills op's weights from get, which returns a stored
// tensor checked against the shape given.
func bindLayerWeights(op string, d LayerDims, get func(name string, shape ...int) ([]float32, error)) (*layerWeights, error) {
	w, sizes := newLayerWeights(op, d)
	err := weights.Walk(w, "", sizes, func(f weights.Field) error {
		shape := fileShape(f.Shape)
		x, err := get(f.Name, shape...)
		if err != nil {
			return err
		}
		if f.IsMatrix() {
			f.SetMatrix(&tensor.Matrix{Rows: shape[0], Cols: shape[1], F32: x})
		} else {
			f.SetVector(x)
		}
		return nil
	})
	return w, err
}

// drawLayerWeight draws one weight by its init class: projections
// N(0, 1/fan_in) so the activations stay O(1); norms near their identity;
// log A and the time-step bias in the ranges Qwen's checkpoints hold.
func drawLayerWeight(seed uint64, f weights.Field) []float32 {
	n := tensor.NumElements(f.Shape)
	r := Rand(seed, StreamFor(f.Name))
	switch f.Init {
	case "log_decay":
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Log(1 + 15*r.Float64()))
		}
		return x
	case "softplus_offset", "zero_centred":
		return Normals(r, n, 0.1)
	case "unit_scale":
		x := Normals(r, n, 0.1)
		for i := range x {
			x[i]++
		}
		return x
	case "conv":
		return Normals(r, n, 0.5)
	}
	return Normals(r, n, 1/math.Sqrt(float64(f.Shape[len(f.Shape)-1])))
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
	lw, sizes := newLayerWeights(op, d)
	if err := weights.Walk(lw, "", sizes, func(f weights.Field) error {
		w := drawLayerWeight(seed, f)
		if err := RoundTo(d.DType, w); err != nil {
			return err
		}
		store(f.Name, w, fileShape(f.Shape))
		return nil
	}); err != nil {
		return nil, err
	}
	lookup := func(name string, _ ...int) ([]float32, error) { return get[name], nil }
	want, err := layerReference(op, d, lookup)
	if err != nil {
		return nil, err
	}
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
func layerReference(op string, d LayerDims, get func(name string, shape ...int) ([]float32, error)) ([]float64, error) {
	lw, err := bindLayerWeights(op, d, get)
	if err != nil {
		return nil, err
	}
	x, err := get("x", d.T, d.H)
	if err != nil {
		return nil, err
	}
	m := func(x *tensor.Matrix) []float64 { return Widen(x.F32) }
	gdn := func() *GDNMixerParams {
		g := lw.GDN
		return &GDNMixerParams{H: d.H, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV, K: d.K, Eps: d.Eps,
			QKV: m(g.InProjQKV), Z: m(g.InProjZ), B: m(g.InProjB), A: m(g.InProjA), Conv: Widen(g.ConvW), ALog: Widen(g.ALog),
			DtBias: Widen(g.DtBias), Norm: Widen(g.NormW), Out: m(g.OutProj)}
	}
	attn := func() *AttentionMixerParams {
		a := lw.Attn
		return &AttentionMixerParams{H: d.H, NH: d.NH, NKV: d.NKV, D: d.D, Rot: d.Rot, Theta: d.Theta, Eps: d.Eps,
			Q: m(a.QProj), K: m(a.KProj), V: m(a.VProj), O: m(a.OProj), QNorm: Widen(a.QNorm), KNorm: Widen(a.KNorm)}
	}
	var out []float64
	switch op {
	case "gdn-layer":
		out, _, err = GDNMixer(Widen(x), d.T, gdn())
	case "attention-layer":
		out, _, err = AttentionMixer(Widen(x), d.T, attn())
	default:
		p := &DecoderParams{H: d.H, I: d.I, Eps: d.Eps, InputNorm: Widen(lw.InputNorm), PostNorm: Widen(lw.PostNorm),
			Gate: m(lw.MLP.Gate), Up: m(lw.MLP.Up), Down: m(lw.MLP.Down)}
		if d.Attention {
			p.Attn = attn()
		} else {
			p.GDN = gdn()
		}
		out, _, err = DecoderLayer(Widen(x), d.T, p)
	}
	return out, err
}

// RunLayerVector runs a layer-level vector's op with qwenref's layers on
// kernels k. get returns a stored tensor, checked against the shape given.
func RunLayerVector(op string, d LayerDims, get func(name string, shape ...int) ([]float32, error), k LayerKernels) ([]float32, error) {
	if err := checkLayerDims(op, d); err != nil {
		return nil, err
	}
	x, err := get("x", d.T, d.H)
	if err != nil {
		return nil, err
	}
	lw, err := bindLayerWeights(op, d, get)
	if err != nil {
		return nil, err
	}
	mix := func(out, x []float32, attn bool) error {
		if attn {
			l := attention.Layer{Dims: attention.LayerDims{Hidden: d.H, NH: d.NH, NKV: d.NKV, D: d.D, RotaryDim: d.Rot, Theta: d.Theta, Eps: float32(d.Eps)},
				W: *lw.Attn}
			return l.Forward(out, x, d.T, &attention.Cache{}, attention.Ops{MatMul: k.MatMul, Core: k.Attn}, nil)
		}
		ld := gateddelta.LayerDims{Hidden: d.H, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV, ConvK: d.K, Eps: float32(d.Eps)}
		l := gateddelta.Layer{Dims: ld, W: *lw.GDN}
		return l.Forward(out, x, d.T, gateddelta.NewState(ld), gateddelta.Ops{MatMul: k.MatMul, Conv: k.Conv, Core: k.Delta}, nil)
	}
	out := make([]float32, d.T*d.H)
	if op != "decoder-layer" {
		return out, mix(out, x, op == "attention-layer")
	}
	// h = x + Mixer(RMSNorm₁₊(x)); out = h + MLP(RMSNorm₁₊(h)).
	eps := float32(d.Eps)
	normed := make([]float32, d.T*d.H)
	if err := norm.RMSNormOnePlus(normed, x, lw.InputNorm, eps); err != nil {
		return nil, err
	}
	if err := mix(out, normed, d.Attention); err != nil {
		return nil, err
	}
	for i, v := range x {
		out[i] += v
	}
	if err := norm.RMSNormOnePlus(normed, out, lw.PostNorm, eps); err != nil {
		return nil, err
	}
	g, u := make([]float32, d.T*d.I), make([]float32, d.T*d.I)
	if err := k.MatMul.MatMulT(g, normed, d.T, lw.MLP.Gate); err != nil {
		return nil, err
	}
	if err := k.MatMul.MatMulT(u, normed, d.T, lw.MLP.Up); err != nil {
		return nil, err
	}
	for i := range g {
		g[i] = float32(SiLU(float64(g[i]))) * u[i]
	}
	down := make([]float32, d.T*d.H)
	if err := k.MatMul.MatMulT(down, g, d.T, lw.MLP.Down); err != nil {
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
