package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/weights"
)

func init() {
	register(&command{name: "golden", summary: "write a test vector (random inputs + float64 reference outputs) for one core op", run: runGolden})
}

// goldenOps are the ops `qwenref golden` can write, with the flags that
// override each one's dimensions.
var goldenOps = map[string][]string{
	"gdn-core":  {"nk", "nv", "dk", "dv"},
	"conv":      {"channels", "kernel"},
	"attention": {"heads", "kv-heads", "head-dim", "past"},
}

// goldenDims are the dimensions of one test vector; which fields matter
// depends on the op.
type goldenDims struct {
	T              int
	NK, NV, DK, DV int // gdn-core
	C, K           int // conv
	NH, NKV, D, P  int // attention (P: cached tokens before the T new ones)
}

func runGolden(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("golden", "--op gdn-core|conv|attention --out FILE.safetensors [--shape tiny] [--seq T] [--seed S] [dimension overrides]", `
Writes a self-contained test vector for one of the three core ops: random
float32 inputs, laid out and named exactly as the op's Kernel interface
takes them, and the expected outputs computed by the float64 reference
implementation (package reference) and rounded once to float32.

Anyone writing a kernel (Go, CUDA, Triton, ...) can load the file, run
their kernel on the inputs and compare with the outputs: a correct float32
kernel lands within about 1e-6 relative L2 of them. The format, every
tensor name, shape and convention (e.g. gdn-core's q and k are already
L2-normalised and q already scaled by dk^-1/2) is in docs/golden-format.md.

Ops and the shapes they take from --shape (a named model shape) unless
overridden:
  gdn-core   gated delta rule core: heads nk/nv, head dims dk/dv
  conv       causal depthwise conv + SiLU: channels 2·nk·dk + nv·dv, kernel K
  attention  causal GQA softmax attention: heads, kv-heads, head-dim;
             --past P puts P cached keys before the T new tokens

The same flags and seed always give the same file.

Examples:
  qwenref golden --op gdn-core --shape 27b --seq 130 --out gdn-27b.safetensors
  qwenref golden --op conv --shape 27b --seq 64 --seed 7 --out conv.safetensors
  qwenref golden --op attention --heads 8 --kv-heads 2 --head-dim 64 \
      --seq 16 --past 48 --out attn.safetensors`, stderr)
	op := fs.String("op", "", "which op: gdn-core, conv or attention")
	out := fs.String("out", "", "output .safetensors file (written atomically)")
	shape := fs.String("shape", "tiny", fmt.Sprintf("named model shape for the default dimensions: %v", model.ShapeNames()))
	seq := fs.Int("seq", 70, "tokens T (70 crosses a 64-token chunk boundary)")
	seed := fs.Uint64("seed", 1, "random seed")
	zeroState := fs.Bool("zero-state", false, "start from a zero state (a fresh sequence) instead of a random one")
	over := map[string]*int{}
	for name, help := range map[string]string{
		"nk": "gdn-core: query/key heads", "nv": "gdn-core: value heads (a multiple of nk)",
		"dk": "gdn-core: key head dim", "dv": "gdn-core: value head dim",
		"channels": "conv: channels C", "kernel": "conv: taps K",
		"heads": "attention: query heads", "kv-heads": "attention: key/value heads (divides heads)",
		"head-dim": "attention: head dim", "past": "attention: cached tokens before the new ones (default 0)",
	} {
		if name != "past" {
			help += " (0: from --shape)"
		}
		over[name] = fs.Int(name, 0, help)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error { return usageError(fs, stderr, format, a...) }
	allowed, ok := goldenOps[*op]
	if !ok {
		return usageErr("--op must be gdn-core, conv or attention, not %q", *op)
	}
	if *out == "" {
		return usageErr("missing --out")
	}
	if *seq < 1 {
		return usageErr("--seq must be at least 1, not %d", *seq)
	}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if _, isDim := over[f.Name]; !isDim || bad != nil {
			return
		}
		if !slices.Contains(allowed, f.Name) {
			bad = usageErr("--%s does not apply to --op %s (its overrides: --%s)", f.Name, *op, strings.Join(allowed, ", --"))
		} else if v := *over[f.Name]; v < 1 && !(f.Name == "past" && v == 0) {
			bad = usageErr("--%s must be positive, not %d", f.Name, v)
		}
	})
	if bad != nil {
		return bad
	}
	cfg, err := model.ShapeConfig(*shape)
	if err != nil {
		return fmt.Errorf("--shape: %w", err)
	}
	pick := func(name string, def int) int {
		if v := *over[name]; v != 0 {
			return v
		}
		return def
	}
	d := goldenDims{
		T:  *seq,
		NK: pick("nk", cfg.LinearNumKeyHeads), NV: pick("nv", cfg.LinearNumValueHeads),
		DK: pick("dk", cfg.LinearKeyHeadDim), DV: pick("dv", cfg.LinearValueHeadDim),
		C: pick("channels", cfg.ConvDim()), K: pick("kernel", cfg.LinearConvKernel),
		NH: pick("heads", cfg.NumHeads), NKV: pick("kv-heads", cfg.NumKVHeads),
		D: pick("head-dim", cfg.HeadDim), P: *over["past"],
	}
	start := time.Now()
	tensors, meta, err := buildGolden(*op, d, *seed, *zeroState)
	if err != nil {
		return err
	}
	meta["shape"] = *shape
	if err := weights.WriteFile(*out, tensors, meta); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "golden: %s %s, seed %d → %s (%v)\n", *op, describeDims(*op, d), *seed, *out, time.Since(start).Round(time.Millisecond))
	for _, t := range tensors {
		fmt.Fprintf(stdout, "  %-13s %s %v\n", t.Name, t.DType, t.Shape)
	}
	return nil
}

func describeDims(op string, d goldenDims) string {
	switch op {
	case "gdn-core":
		return fmt.Sprintf("T=%d nk=%d nv=%d dk=%d dv=%d", d.T, d.NK, d.NV, d.DK, d.DV)
	case "conv":
		return fmt.Sprintf("T=%d C=%d K=%d", d.T, d.C, d.K)
	}
	return fmt.Sprintf("T=%d past=%d heads=%d kv-heads=%d head-dim=%d", d.T, d.P, d.NH, d.NKV, d.D)
}

// buildGolden draws the inputs of op, runs the float64 reference on them
// (exactly as stored, i.e. after rounding to float32) and returns the
// tensors to write, inputs first, with the metadata that describes them.
func buildGolden(op string, d goldenDims, seed uint64, zeroState bool) ([]weights.NamedTensor, map[string]string, error) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	meta := map[string]string{
		"producer":  "qwenref golden",
		"op":        op,
		"seed":      strconv.FormatUint(seed, 10),
		"T":         strconv.Itoa(d.T),
		"reference": "float64, rounded once to float32",
	}
	f32 := func(name string, data []float32, shape ...int) weights.NamedTensor {
		return weights.NamedTensor{Name: name, DType: "F32", Shape: shape, Data: data}
	}
	state := func(n int, std float64) []float32 {
		if zeroState {
			return make([]float32, n)
		}
		return normals(r, n, std)
	}
	switch op {
	case "gdn-core":
		gd := gateddelta.Dims{T: d.T, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
		if d.NV%d.NK != 0 {
			return nil, nil, fmt.Errorf("--nv %d must be a multiple of --nk %d", d.NV, d.NK)
		}
		// q and k as the layer hands them to the core: unit rows, q scaled.
		q := unitRows(normals(r, d.T*d.NK*d.DK, 1), d.DK, 1/math.Sqrt(float64(d.DK)))
		k := unitRows(normals(r, d.T*d.NK*d.DK, 1), d.DK, 1)
		v := normals(r, d.T*d.NV*d.DV, 1)
		g, beta := make([]float32, d.T*d.NV), make([]float32, d.T*d.NV)
		for t := 0; t < d.T; t++ {
			for j := 0; j < d.NV; j++ {
				// Head j's decay rate spans 10^-2..1 across heads, so some
				// heads remember for ~100 tokens (testing the carry across
				// chunks) and some forget within a few.
				rate := math.Pow(10, -2*(1-(float64(j)+0.5)/float64(d.NV)))
				g[t*d.NV+j] = float32(-rate * softplus(r.NormFloat64()))
				beta[t*d.NV+j] = float32(1 / (1 + math.Exp(-r.NormFloat64())))
			}
		}
		s0 := state(d.NV*d.DK*d.DV, 0.5)
		out := make([]float64, d.T*d.NV*d.DV)
		s := reference.Widen(s0)
		if err := reference.GatedDeltaRule(out, reference.Widen(q), reference.Widen(k), reference.Widen(v),
			reference.Widen(g), reference.Widen(beta), gd, s); err != nil {
			return nil, nil, err
		}
		for k, v := range map[string]int{"NK": d.NK, "NV": d.NV, "DK": d.DK, "DV": d.DV} {
			meta[k] = strconv.Itoa(v)
		}
		return []weights.NamedTensor{
			f32("q", q, d.T, d.NK, d.DK), f32("k", k, d.T, d.NK, d.DK), f32("v", v, d.T, d.NV, d.DV),
			f32("g", g, d.T, d.NV), f32("beta", beta, d.T, d.NV), f32("initial_state", s0, d.NV, d.DK, d.DV),
			f32("out", reference.Narrow(out), d.T, d.NV, d.DV), f32("final_state", reference.Narrow(s), d.NV, d.DK, d.DV),
		}, meta, nil

	case "conv":
		x := normals(r, d.T*d.C, 1)
		w := normals(r, d.C*d.K, 0.5)
		s0 := state(d.K*d.C, 1)
		y := make([]float64, d.T*d.C)
		s := reference.Widen(s0)
		if err := reference.CausalConvSiLU(y, reference.Widen(x), d.T, d.C, reference.Widen(w), d.K, s); err != nil {
			return nil, nil, err
		}
		meta["C"], meta["K"] = strconv.Itoa(d.C), strconv.Itoa(d.K)
		return []weights.NamedTensor{
			f32("x", x, d.T, d.C), f32("weight", w, d.C, d.K), f32("initial_state", s0, d.K, d.C),
			f32("y", reference.Narrow(y), d.T, d.C), f32("final_state", reference.Narrow(s), d.K, d.C),
		}, meta, nil

	case "attention":
		if d.NH%d.NKV != 0 {
			return nil, nil, fmt.Errorf("--heads %d must be a multiple of --kv-heads %d", d.NH, d.NKV)
		}
		s := d.P + d.T
		ad := attention.Dims{T: d.T, S: s, NH: d.NH, NKV: d.NKV, D: d.D}
		q := normals(r, d.T*d.NH*d.D, 1)
		k := normals(r, s*d.NKV*d.D, 1)
		v := normals(r, s*d.NKV*d.D, 1)
		// The scale is stored as text with every digit of its float32 value.
		scale := float32(1 / math.Sqrt(float64(d.D)))
		out := make([]float64, d.T*d.NH*d.D)
		if err := reference.Attention(out, reference.Widen(q), reference.Widen(k), reference.Widen(v), ad, float64(scale)); err != nil {
			return nil, nil, err
		}
		for k, v := range map[string]int{"S": s, "NH": d.NH, "NKV": d.NKV, "D": d.D} {
			meta[k] = strconv.Itoa(v)
		}
		meta["scale"] = strconv.FormatFloat(float64(scale), 'g', -1, 32)
		return []weights.NamedTensor{
			f32("q", q, d.T, d.NH, d.D), f32("k", k, s, d.NKV, d.D), f32("v", v, s, d.NKV, d.D),
			f32("out", reference.Narrow(out), d.T, d.NH, d.D),
		}, meta, nil
	}
	return nil, nil, fmt.Errorf("unknown op %q", op)
}

func normals(r *rand.Rand, n int, std float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * std)
	}
	return out
}

// unitRows scales each row of x to L2 norm `norm` (computed in float64,
// with no epsilon: random rows are never near zero) and rounds to float32.
func unitRows(x []float32, dim int, norm float64) []float32 {
	w := reference.Widen(x)
	_ = reference.L2Normalize(w, dim, 0) // dim divides len(x) by construction
	for i := range x {
		x[i] = float32(w[i] * norm)
	}
	return x
}

func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}
