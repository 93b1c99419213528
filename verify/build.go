package verify

import (
	"fmt"
	"slices"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
)

// DTypes are the input dtypes a golden file can hold.
var DTypes = reference.DTypes

// LayerOps are the ops whose golden files carry a whole layer's weights;
// the others are the core ops (gdn-core, conv, attention).
var LayerOps = reference.LayerVectorOps

// GoldenSpec says which golden file to build: the op, its widths (a
// named shape's, with per-dimension overrides for the core ops), T, the
// dtype of its inputs and the seed.
type GoldenSpec struct {
	Op        string
	Shape     string         // the named shape, for messages
	Config    *model.Config  // the named shape's config: the widths
	Overrides map[string]int // core ops: nk, nv, dk, dv, channels, kernel, heads, kv-heads, head-dim, past (0: the shape's)
	T         int
	SeqLens   []int // gdn-core: packed sequences (cu_seqlens), summing to T
	DType     string
	Seed      uint64
	ZeroState bool // gdn-core and conv: start from a zero state
	// Grad writes a gradient golden (core ops): upstream gradients and
	// every input's gradient besides the forward tensors; L2Norm
	// (gdn-core, with Grad) stores raw q and k, normalised in the op.
	Grad, L2Norm bool
	// Bias (conv, with Grad) gives the conv a per-channel bias and the
	// file its gradient dbias.
	Bias      bool
	Attention bool // decoder-layer: an attention layer instead of a GDN one
	// MemLimit bounds what building may allocate (0: none); MemSource
	// names where the limit came from, for the error.
	MemLimit  int64
	MemSource string
}

// BuildGolden draws a golden file's inputs and computes its reference
// outputs, after checking every dimension and the memory it needs; the
// description says what was built (op and dims).
func BuildGolden(s GoldenSpec) (*reference.Vector, string, error) {
	if !slices.Contains(DTypes, s.DType) {
		return nil, "", fmt.Errorf("dtype must be f32, bf16 or f16, not %q", s.DType)
	}
	if s.L2Norm && (!s.Grad || s.Op != "gdn-core") {
		return nil, "", fmt.Errorf("--l2norm applies to --op gdn-core with --grad only")
	}
	if s.Op == "gated-rmsnorm" && !s.Grad {
		return nil, "", fmt.Errorf("gated-rmsnorm files are gradient files: add --grad")
	}
	if s.Bias && (!s.Grad || s.Op != "conv") {
		return nil, "", fmt.Errorf("--bias applies to --op conv with --grad only")
	}
	if s.Grad && slices.Contains(LayerOps, s.Op) {
		return nil, "", fmt.Errorf("--grad applies to the core ops (gdn-core, conv, attention), not %s", s.Op)
	}
	if slices.Contains(LayerOps, s.Op) {
		d := LayerGoldenDims(s.Config, s.Op, s.Attention, s.T, s.DType)
		if err := layerGoldenMemory(s, d); err != nil {
			return nil, "", err
		}
		vec, err := reference.BuildLayerVector(s.Op, d, s.Seed)
		if err != nil {
			return nil, "", err
		}
		what := s.Op
		if s.Op == "decoder-layer" {
			what += " (" + vec.Meta["layer_type"] + ")"
		}
		return vec, fmt.Sprintf("%s T=%d H=%d", what, s.T, d.H), nil
	}
	cfg := s.Config
	pick := func(name string, def int) int {
		if v := s.Overrides[name]; v != 0 {
			return v
		}
		return def
	}
	d := reference.VectorDims{
		T:  s.T,
		NK: pick("nk", cfg.LinearNumKeyHeads), NV: pick("nv", cfg.LinearNumValueHeads),
		DK: pick("dk", cfg.LinearKeyHeadDim), DV: pick("dv", cfg.LinearValueHeadDim),
		C: pick("channels", cfg.ConvDim()), K: pick("kernel", cfg.LinearConvKernel),
		NH: pick("heads", cfg.NumHeads), NKV: pick("kv-heads", cfg.NumKVHeads),
		D: pick("head-dim", cfg.HeadDim), P: s.Overrides["past"],
		DType: s.DType, SeqLens: s.SeqLens, ConvBias: s.Bias,
	}
	if err := coreGoldenMemory(s, d); err != nil {
		return nil, "", err
	}
	switch {
	case s.Op == "gdn-core" && d.NV%d.NK != 0:
		return nil, "", fmt.Errorf("--nv %d must be a multiple of --nk %d", d.NV, d.NK)
	case s.Op == "attention" && d.NH%d.NKV != 0:
		return nil, "", fmt.Errorf("--heads %d must be a multiple of --kv-heads %d", d.NH, d.NKV)
	}
	if s.Grad {
		vec, err := reference.BuildGradVector(s.Op, d, s.Seed, s.ZeroState, s.L2Norm)
		if err != nil {
			return nil, "", err
		}
		return vec, s.Op + " gradients " + d.Describe(s.Op), nil
	}
	vec, err := reference.BuildVector(s.Op, d, s.Seed, s.ZeroState)
	if err != nil {
		return nil, "", err
	}
	return vec, s.Op + " " + d.Describe(s.Op), nil
}

// layerGoldenMemory refuses a layer golden the memory limit cannot take:
// weights and activations are held in float32 and float64 (12 bytes),
// with a few [T, widest] buffers.
func layerGoldenMemory(s GoldenSpec, d reference.LayerDims) error {
	c := 2*d.NK*d.DK + d.NV*d.DV
	widest := max(d.H, d.I, c, 2*d.NH*d.D)
	weightsN, ok1 := mulInts(d.H, c+d.NV*d.DV+2*d.NV+3*d.I+4*d.NH*d.D)
	actN, ok2 := mulInts(s.T, widest, 16)
	if total := (weightsN + actN) * 12; !ok1 || !ok2 || s.T > 1<<16 || (s.MemLimit > 0 && total > s.MemLimit) {
		return fmt.Errorf("%s at shape %s with --seq %d needs more than the memory limit (%s): choose a smaller --shape or --seq", s.Op, s.Shape, s.T, s.MemSource)
	}
	return nil
}

// coreGoldenMemory bounds a core-op golden before it allocates: every
// dimension positive (the past P may be 0) and at most model.MaxDim, and
// the vectors (float32 tensors written plus their float64 reference,
// about 24 bytes a value; a gradient golden holds about three times as
// many tensors, and its gdn-core backward (T/64 + 66) states a head)
// under the memory limit.
func coreGoldenMemory(s GoldenSpec, d reference.VectorDims) error {
	dims := map[string]int{"--seq": d.T}
	var perT, fixed []int
	switch s.Op {
	case "gdn-core":
		dims["--nk"], dims["--nv"], dims["--dk"], dims["--dv"] = d.NK, d.NV, d.DK, d.DV
		perT = []int{2*d.NK*d.DK + 3*d.NV*d.DV + 2*d.NV}
		fixed = []int{2, d.NV, d.DK, d.DV}
	case "conv":
		dims["--channels"], dims["--kernel"] = d.C, d.K
		perT = []int{2 * d.C}
		fixed = []int{d.C, d.K}
	case "gated-rmsnorm":
		dims["--nv"], dims["--dv"] = d.NV, d.DV
		perT = []int{5 * d.NV * d.DV}
		fixed = []int{3, d.DV}
	case "attention":
		dims["--heads"], dims["--kv-heads"], dims["--head-dim"] = d.NH, d.NKV, d.D
		perT = []int{d.T + d.P, d.NH}
		fixed = []int{d.T + d.P, 2*d.NH + 4*d.NKV, d.D}
	default:
		return fmt.Errorf("no golden op %q", s.Op)
	}
	for _, name := range []string{"--seq", "--nk", "--nv", "--dk", "--dv", "--channels", "--kernel", "--heads", "--kv-heads", "--head-dim"} {
		if v, ok := dims[name]; ok && (v < 1 || v > model.MaxDim) {
			return fmt.Errorf("%s %d: want 1 to %d", name, v, model.MaxDim)
		}
	}
	if d.P < 0 || d.P > model.MaxDim {
		return fmt.Errorf("--past %d: want 0 to %d", d.P, model.MaxDim)
	}
	a, ok1 := mulInts(append([]int{d.T}, perT...)...)
	b, ok2 := mulInts(fixed...)
	total := (a + b) * 24
	if s.Grad {
		extra, ok3 := int64(0), true
		switch s.Op {
		case "gdn-core":
			extra, ok3 = mulInts(d.T/64+66, d.DK, d.DV)
		case "conv":
			extra, ok3 = mulInts(len(d.SeqLens)+1, d.K, d.C)
		}
		total = 3*total + 24*extra
		ok2 = ok2 && ok3
	}
	if !ok1 || !ok2 || total < 0 || s.MemLimit > 0 && total > s.MemLimit {
		return fmt.Errorf("%s %s needs more than the limit of %.3g GiB (%s): choose a smaller --seq or dims",
			s.Op, d.Describe(s.Op), float64(s.MemLimit)/(1<<30), s.MemSource)
	}
	return nil
}

// mulInts multiplies, reporting false past 2^50 (far over any RAM).
func mulInts(fs ...int) (int64, bool) {
	p := int64(1)
	for _, f := range fs {
		if f < 0 || f > 0 && p > (1<<50)/int64(f) {
			return 0, false
		}
		p *= int64(f)
	}
	return p, true
}
