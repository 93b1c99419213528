package reference

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// Gradient vectors (`qwenref golden --grad`, docs/golden-format.md): a
// core op's inputs, an upstream gradient of every output, the outputs
// and every input's float64 gradient. Besides the forward files' tensors,
// a gradient file stores d<output> (the upstream gradients) and
// d<input> (the expected gradients), and per output a bar.
//
// Dtypes: the tensors a bf16 or f16 model holds in that dtype (q, k, v,
// beta, the conv's x, weight and state, attention's q, k, v and gate, and
// the upstream gradients of their outputs) are rounded to it and stored
// in it; the log-decay g and the recurrent states, which the model keeps
// in float32, and their gradients stay F32 in every file.

// The gradient bar (docs/tolerances.md's error model, as for a forward
// check): relative L2 min(1e-5, 8·2⁻²⁴·√n) for a float32 kernel with n
// the gradient's reduction length, but no less than 4 times the error of
// storing that gradient in its tensor's dtype and no less than 1e-6;
// scaled max-abs 10 times that.
const (
	gradF32Cap = 1e-5
	gradULP    = 8.0 / (1 << 24)
)

// gradBar is the bar of one gradient of reduction length n whose tensor is
// stored in dtype.
func gradBar(want []float64, n int, dtype string) (tensor.Tolerance, error) {
	rel := math.Max(minRelL2, math.Min(gradF32Cap, gradULP*math.Sqrt(float64(n))))
	tol := tensor.Tolerance{RelL2: rel, MaxAbsScaled: 10 * rel}
	stored := Narrow(want)
	if err := RoundTo(dtype, stored); err != nil {
		return tol, err
	}
	r := tensor.CompareStage(stored, Narrow(want))
	tol.RelL2 = math.Max(tol.RelL2, outputRoundingMargin*r.RelL2)
	tol.MaxAbsScaled = math.Max(tol.MaxAbsScaled, outputRoundingMargin*r.MaxAbsScaled)
	return tol, nil
}

// gradOutput is one expected tensor of a gradient vector: its float64
// value, shape, the dtype whose storage error its bar allows (f32 for the
// float32 tensors) and its reduction length.
type gradOutput struct {
	name  string
	want  []float64
	shape []int
	dtype string
	n     int
}

// GDNPackedBackward is GatedDeltaRuleBackward (or, with l2, the L2 form's)
// over packed sequences: each segment of segs tokens from its own initial
// state in states [len(segs), NV, DK, DV], with its own dfinal. It returns
// the outputs, the final states and the gradients; State holds one
// initial-state gradient per sequence.
func GDNPackedBackward(q, k, v, g, beta []float64, d gateddelta.Dims, segs []int, states, dout, dfinal []float64, l2 bool) (out, final []float64, gr *GDNGrads, err error) {
	if _, err := segments(d.T, segs); err != nil {
		return nil, nil, nil, err
	}
	sz, qk, hv := d.NV*d.DK*d.DV, d.NK*d.DK, d.NV*d.DV
	if len(states) != len(segs)*sz || len(dfinal) != len(states) {
		return nil, nil, nil, fmt.Errorf("gdn-core: %d states and %d final-state gradients for %d sequences of %d", len(states), len(dfinal), len(segs), sz)
	}
	out, final = make([]float64, d.T*hv), slices.Clone(states)
	gr = &GDNGrads{Q: make([]float64, len(q)), K: make([]float64, len(k)), V: make([]float64, len(v)),
		G: make([]float64, len(g)), Beta: make([]float64, len(beta)), State: make([]float64, len(states))}
	fwd, bwd := GatedDeltaRule, GatedDeltaRuleBackward
	if l2 {
		fwd, bwd = GatedDeltaRuleL2, GatedDeltaRuleL2Backward
	}
	at := 0
	for i, n := range segs {
		sd := d
		sd.T = n
		sl := func(x []float64, w int) []float64 { return x[at*w : (at+n)*w] }
		s0 := slices.Clone(states[i*sz : (i+1)*sz])
		if err := fwd(sl(out, hv), sl(q, qk), sl(k, qk), sl(v, hv), sl(g, d.NV), sl(beta, d.NV), sd, final[i*sz:(i+1)*sz]); err != nil {
			return nil, nil, nil, err
		}
		sg, err := bwd(sl(q, qk), sl(k, qk), sl(v, hv), sl(g, d.NV), sl(beta, d.NV), sd, s0, sl(dout, hv), dfinal[i*sz:(i+1)*sz])
		if err != nil {
			return nil, nil, nil, err
		}
		copy(sl(gr.Q, qk), sg.Q)
		copy(sl(gr.K, qk), sg.K)
		copy(sl(gr.V, hv), sg.V)
		copy(sl(gr.G, d.NV), sg.G)
		copy(sl(gr.Beta, d.NV), sg.Beta)
		copy(gr.State[i*sz:], sg.State)
		at += n
	}
	return out, final, gr, nil
}

// ConvPackedBackward is CausalConvSiLUBackward over packed sequences,
// each from its own initial state in states [len(segs), K, C], with a
// per-channel bias (nil: none): the outputs, final states and gradients,
// W and Bias summed over the sequences.
func ConvPackedBackward(x []float64, t, c int, w []float64, k int, bias []float64, segs []int, states, dy, dfinal []float64) (y, final []float64, gr *ConvGrads, err error) {
	if _, err := segments(t, segs); err != nil {
		return nil, nil, nil, err
	}
	if len(states) != len(segs)*k*c || len(dfinal) != len(states) || len(x) != t*c || len(dy) != t*c {
		return nil, nil, nil, fmt.Errorf("conv: %d states, %d final-state gradients, %d inputs and %d output gradients for %d sequences of T=%d C=%d K=%d",
			len(states), len(dfinal), len(x), len(dy), len(segs), t, c, k)
	}
	y, final = make([]float64, t*c), slices.Clone(states)
	gr = &ConvGrads{X: make([]float64, t*c), W: make([]float64, c*k), State: make([]float64, len(states))}
	if bias != nil {
		gr.Bias = make([]float64, c)
	}
	at, sz := 0, k*c
	for i, n := range segs {
		xs := x[at*c : (at+n)*c]
		if err := CausalConvSiLUBias(y[at*c:(at+n)*c], xs, n, c, w, k, bias, final[i*sz:(i+1)*sz]); err != nil {
			return nil, nil, nil, err
		}
		sg, err := CausalConvSiLUBackward(xs, n, c, w, k, bias, states[i*sz:(i+1)*sz], dy[at*c:(at+n)*c], dfinal[i*sz:(i+1)*sz])
		if err != nil {
			return nil, nil, nil, err
		}
		copy(gr.X[at*c:], sg.X)
		copy(gr.State[i*sz:], sg.State)
		for j, v := range sg.W {
			gr.W[j] += v
		}
		for j, v := range sg.Bias {
			gr.Bias[j] += v
		}
		at += n
	}
	return y, final, gr, nil
}

// BuildGradVector draws op's inputs and upstream gradients from seed, runs
// the float64 forward and backward on them exactly as stored and returns
// the vector. l2 (gdn-core) stores raw q and k and normalises them in the
// op; for attention the output carries the layer's sigmoid gate.
func BuildGradVector(op string, d VectorDims, seed uint64, zeroState, l2 bool) (*Vector, error) {
	dtype := d.DType
	if dtype == "" {
		dtype = "f32"
	}
	if !slices.Contains(DTypes, dtype) {
		return nil, fmt.Errorf("unknown dtype %q (dtypes: f32, bf16, f16)", dtype)
	}
	if l2 && op != "gdn-core" {
		return nil, fmt.Errorf("--l2norm applies to gdn-core only, not %s", op)
	}
	if len(d.SeqLens) > 0 && op != "gdn-core" && op != "conv" {
		return nil, fmt.Errorf("--seqlens applies to gdn-core and conv, not %s", op)
	}
	if d.ConvBias && op != "conv" {
		return nil, fmt.Errorf("--bias applies to conv only, not %s", op)
	}
	segs, err := segments(d.T, d.SeqLens)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{"producer": "qwenref golden", "op": op, "grad": "1", "seed": strconv.FormatUint(seed, 10),
		"T": strconv.Itoa(d.T), "dtype": dtype,
		"reference": "float64 forward and backward from the rounded inputs, rounded once to float32",
		"tol.rule": fmt.Sprintf("max(min(%g, 8 x 2^-24 x sqrt(n)), %d x the error of storing the tensor in its dtype, %g); max_abs_scaled 10 x",
			gradF32Cap, outputRoundingMargin, minRelL2)}
	if len(d.SeqLens) > 0 {
		meta["cu_seqlens"] = cuSeqlens(segs)
	}
	r := Rand(seed, StreamFor("grad/"+op))
	var ins []weights.NamedTensor
	var outs []gradOutput
	// draw makes x an input stored in dt, rounded to it (dt is checked
	// above, so RoundTo cannot fail).
	draw := func(name, dt string, x []float32, shape ...int) []float64 {
		_ = RoundTo(dt, x)
		ins = append(ins, weights.NamedTensor{Name: name, DType: fileDType(dt), Shape: shape, Data: x})
		return Widen(x)
	}
	longest := slices.Max(segs)
	stShape := func(s ...int) []int {
		if len(d.SeqLens) > 0 {
			return append([]int{len(segs)}, s...)
		}
		return s
	}
	switch op {
	case "gdn-core":
		dims := gateddelta.Dims{T: d.T, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
		gin, err := NewGDNInputs(seed, dims, GDNOptions{WithState: !zeroState})
		if err != nil {
			return nil, err
		}
		sz := d.NV * d.DK * d.DV
		states := Normals(r, len(segs)*sz, 0.5)
		if zeroState {
			clear(states)
		}
		qIn, kIn := gin.Q, gin.K
		if l2 { // raw rows, of varied norms, for the op to normalise
			qIn, kIn = Normals(r, len(gin.Q), 1), Normals(r, len(gin.K), 1)
			meta["l2norm"] = "1"
		}
		q := draw("q", dtype, qIn, d.T, d.NK, d.DK)
		k := draw("k", dtype, kIn, d.T, d.NK, d.DK)
		v := draw("v", dtype, gin.V, d.T, d.NV, d.DV)
		g := draw("g", "f32", gin.G, d.T, d.NV)
		b := draw("beta", dtype, gin.Beta, d.T, d.NV)
		s0 := draw("initial_state", "f32", states, stShape(d.NV, d.DK, d.DV)...)
		dout := draw("dout", dtype, Normals(r, d.T*d.NV*d.DV, 1), d.T, d.NV, d.DV)
		dfin := draw("dfinal_state", "f32", Normals(r, len(states), 1), stShape(d.NV, d.DK, d.DV)...)
		out, final, gr, err := GDNPackedBackward(q, k, v, g, b, dims, segs, s0, dout, dfin, l2)
		if err != nil {
			return nil, err
		}
		n := longest*max(d.DK, d.DV) + d.DK
		outs = []gradOutput{{"out", out, []int{d.T, d.NV, d.DV}, dtype, n}, {"final_state", final, stShape(d.NV, d.DK, d.DV), "f32", n},
			{"dq", gr.Q, []int{d.T, d.NK, d.DK}, dtype, n}, {"dk", gr.K, []int{d.T, d.NK, d.DK}, dtype, n},
			{"dv", gr.V, []int{d.T, d.NV, d.DV}, dtype, n}, {"dg", gr.G, []int{d.T, d.NV}, "f32", n},
			{"dbeta", gr.Beta, []int{d.T, d.NV}, dtype, n}, {"dinitial_state", gr.State, stShape(d.NV, d.DK, d.DV), "f32", n}}
		for k, v := range map[string]int{"NK": d.NK, "NV": d.NV, "DK": d.DK, "DV": d.DV} {
			meta[k] = strconv.Itoa(v)
		}
	case "conv":
		cin, err := NewConvInputs(seed, d.T, d.C, d.K, !zeroState)
		if err != nil {
			return nil, err
		}
		states := Normals(r, len(segs)*d.K*d.C, 1)
		if zeroState {
			clear(states)
		}
		x := draw("x", dtype, cin.X, d.T, d.C)
		w := draw("weight", dtype, cin.W, d.C, d.K)
		var bias []float64
		if d.ConvBias { // drawn after the others, so a file without one is unchanged
			bias = draw("bias", dtype, Normals(Rand(seed, StreamFor("grad/conv/bias")), d.C, 0.5), d.C)
			meta["bias"] = "1"
		}
		s0 := draw("initial_state", dtype, states, stShape(d.K, d.C)...)
		dy := draw("dy", dtype, Normals(r, d.T*d.C, 1), d.T, d.C)
		dfin := draw("dfinal_state", dtype, Normals(r, len(states), 1), stShape(d.K, d.C)...)
		y, final, gr, err := ConvPackedBackward(x, d.T, d.C, w, d.K, bias, segs, s0, dy, dfin)
		if err != nil {
			return nil, err
		}
		outs = []gradOutput{{"y", y, []int{d.T, d.C}, dtype, d.K}, {"final_state", final, stShape(d.K, d.C), dtype, 1},
			{"dx", gr.X, []int{d.T, d.C}, dtype, d.K}, {"dweight", gr.W, []int{d.C, d.K}, dtype, d.T},
			{"dinitial_state", gr.State, stShape(d.K, d.C), dtype, d.K}}
		if bias != nil {
			outs = append(outs, gradOutput{"dbias", gr.Bias, []int{d.C}, dtype, d.T})
		}
		meta["C"], meta["K"] = strconv.Itoa(d.C), strconv.Itoa(d.K)
	case "attention":
		s := d.P + d.T
		ad := attention.Dims{T: d.T, S: s, NH: d.NH, NKV: d.NKV, D: d.D}
		ain, err := NewAttentionInputs(seed, ad)
		if err != nil {
			return nil, err
		}
		q := draw("q", dtype, ain.Q, d.T, d.NH, d.D)
		k := draw("k", dtype, ain.K, s, d.NKV, d.D)
		v := draw("v", dtype, ain.V, s, d.NKV, d.D)
		gate := draw("gate", dtype, Normals(r, len(ain.Q), 1.5), d.T, d.NH, d.D)
		dout := draw("dout", dtype, Normals(r, len(ain.Q), 1), d.T, d.NH, d.D)
		out := make([]float64, len(q))
		if err := GatedAttention(out, q, k, v, gate, ad, float64(ain.Scale)); err != nil {
			return nil, err
		}
		gr, err := GatedAttentionBackward(q, k, v, gate, ad, float64(ain.Scale), dout)
		if err != nil {
			return nil, err
		}
		n := s*(d.NH/d.NKV) + d.D
		outs = []gradOutput{{"out", out, []int{d.T, d.NH, d.D}, dtype, s + d.D},
			{"dq", gr.Q, []int{d.T, d.NH, d.D}, dtype, n}, {"dk", gr.K, []int{s, d.NKV, d.D}, dtype, n},
			{"dv", gr.V, []int{s, d.NKV, d.D}, dtype, n}, {"dgate", gr.Gate, []int{d.T, d.NH, d.D}, dtype, n}}
		for k, v := range map[string]int{"S": s, "NH": d.NH, "NKV": d.NKV, "D": d.D} {
			meta[k] = strconv.Itoa(v)
		}
		meta["scale"] = strconv.FormatFloat(float64(ain.Scale), 'g', -1, 32)
		meta["gate"] = "1"
	case "gated-rmsnorm":
		outs, err = gatedNormGrad(d, r, dtype, draw, meta)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown op %q for --grad (ops: gdn-core, conv, attention, gated-rmsnorm)", op)
	}
	vec := &Vector{Meta: meta, Tensors: ins}
	for _, o := range outs {
		tol, err := gradBar(o.want, o.n, o.dtype)
		if err != nil {
			return nil, err
		}
		VectorTolerance{o.name: tol}.setBars(meta)
		vec.Tensors = append(vec.Tensors, weights.NamedTensor{Name: o.name, DType: "F32", Shape: o.shape, Data: Narrow(o.want)})
	}
	return vec, nil
}

// fileDType is the safetensors dtype a vector stores dtype's tensors in.
func fileDType(dtype string) string {
	switch dtype {
	case "bf16":
		return "BF16"
	case "f16":
		return "F16"
	}
	return "F32"
}

// GatedNormEps is the ε of a gated-rmsnorm gradient file: Qwen3.5's
// rms_norm_eps.
const GatedNormEps = 1e-6

// gatedNormGrad draws a gated-rmsnorm gradient vector: the GDN layer's
// output norm per value head, x and z [T, NV, DV], weight [DV], and the
// upstream gradient dy; it returns y, dx, dz and dweight.
func gatedNormGrad(d VectorDims, r *rand.Rand, dtype string, draw func(string, string, []float32, ...int) []float64, meta map[string]string) ([]gradOutput, error) {
	if d.NV < 1 || d.DV < 1 {
		return nil, fmt.Errorf("gated-rmsnorm: bad dims NV=%d DV=%d", d.NV, d.DV)
	}
	n := d.T * d.NV * d.DV
	w := Normals(r, d.DV, 0.2)
	for i := range w {
		w[i]++
	}
	x := draw("x", dtype, Normals(r, n, 1), d.T, d.NV, d.DV)
	z := draw("z", dtype, Normals(r, n, 1.5), d.T, d.NV, d.DV)
	wt := draw("weight", dtype, w, d.DV)
	dy := draw("dy", dtype, Normals(r, n, 1), d.T, d.NV, d.DV)
	y, err := GatedRMSNorm(x, z, wt, d.DV, GatedNormEps)
	if err != nil {
		return nil, err
	}
	dx, dz, dw, err := GatedRMSNormBackward(x, z, wt, d.DV, GatedNormEps, dy)
	if err != nil {
		return nil, err
	}
	meta["NV"], meta["DV"] = strconv.Itoa(d.NV), strconv.Itoa(d.DV)
	meta["eps"] = strconv.FormatFloat(GatedNormEps, 'g', -1, 64)
	sh := []int{d.T, d.NV, d.DV}
	return []gradOutput{{"y", y, sh, dtype, d.DV}, {"dx", dx, sh, dtype, d.DV}, {"dz", dz, sh, dtype, d.DV},
		{"dweight", dw, []int{d.DV}, dtype, d.T * d.NV}}, nil
}
