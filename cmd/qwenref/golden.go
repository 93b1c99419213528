package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/verify"
)

func init() {
	register(&command{name: "golden", summary: "write a test vector (random inputs + float64 reference outputs) for one core op", run: runGolden})
}

// goldenOps are the ops `qwenref golden` can write, with the flags that
// override each one's dimensions.
var goldenOps = map[string][]string{
	"gdn-core":      {"nk", "nv", "dk", "dv"},
	"conv":          {"channels", "kernel"},
	"attention":     {"heads", "kv-heads", "head-dim", "past"},
	"gated-rmsnorm": {"nv", "dv"}, // --grad only
	// The layer ops take every width from --shape.
	"gdn-layer": {}, "attention-layer": {}, "decoder-layer": {},
}

// Caps on --seqlens, checked before anything is allocated (--seq itself
// is bounded by verify.BuildGolden).
const (
	maxGoldenSeq  = 1 << 20
	maxGoldenSeqs = 4096
)

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
Layer ops, with random weights (checkpoint names) at the widths of --shape,
from a fresh sequence:
  gdn-layer        the Gated DeltaNet mixer: x [T, H] (already normed) → out
  attention-layer  the gated attention mixer, RoPE at positions 0..T-1
  decoder-layer    a whole decoder layer (norms, mixer, MLP, residuals) on
                   the residual stream; --kind gdn|attention

--dtype bf16|f16 rounds every input to that dtype (and stores the
inputs as BF16 or F16) and computes the
float64 reference from the rounded values, so the expected outputs are
exact for what a bf16 or f16 kernel is handed. Every file records in its
metadata (tol.<output>.rel_l2, tol.<output>.max_abs_scaled) the bars a
correct kernel of that dtype meets; 'qwenref check' and the Python kit
(python/) use them. gdn-core --seqlens 37,300,1 packs several sequences
(fla's cu_seqlens convention): each starts from its own initial state,
initial_state and final_state are [N, NV, DK, DV], and the metadata holds
cu_seqlens.

--grad writes a gradient golden for gdn-core, conv, attention or
gated-rmsnorm (the GDN output norm; --grad only): inputs, upstream
gradients (dout or dy, dfinal_state), outputs and every input's float64
gradient (dq, ..., dinitial_state) with their bars; attention carries the
sigmoid output gate, conv takes --seqlens and --bias (dbias), gdn-core
--l2norm raw q and k. 'qwenref check --grad' checks a backward on it.

The same flags and seed always give the same file.

Examples:
  qwenref golden --op gdn-core --shape 27b --seq 130 --out gdn-27b.safetensors
  qwenref golden --op conv --shape 27b --seq 64 --seed 7 --out conv.safetensors
  qwenref golden --op gdn-core --dtype bf16 --seqlens 37,300,1 --out packed.safetensors
  qwenref golden --op gdn-core --grad --l2norm --seqlens 3,64,70 --out gdn-grad.safetensors
  qwenref golden --op decoder-layer --kind attention --shape 0.8b --seq 16 --out layer.safetensors
  qwenref golden --op attention --heads 8 --kv-heads 2 --head-dim 64 \
      --seq 16 --past 48 --out attn.safetensors`, stderr)
	op := fs.String("op", "", "which op: gdn-core, conv, attention, gated-rmsnorm (--grad), gdn-layer, attention-layer or decoder-layer")
	kind := fs.String("kind", "gdn", "decoder-layer: the layer's mixer, gdn or attention")
	out := fs.String("out", "", "output .safetensors file (written atomically)")
	shape := fs.String("shape", "tiny", fmt.Sprintf("named model shape for the default dimensions: %v", model.ShapeNames()))
	seq := fs.Int("seq", 70, "tokens T (70 crosses a 64-token chunk boundary)")
	seed := fs.Uint64("seed", 1, "random seed")
	zeroState := fs.Bool("zero-state", false, "start from a zero state (a fresh sequence) instead of a random one")
	dtype := fs.String("dtype", "f32", "input dtype: f32, bf16 or f16 (inputs rounded to it; the reference is computed from the rounded inputs)")
	seqlens := fs.String("seqlens", "", "gdn-core (and conv with --grad): pack sequences of these lengths, e.g. 37,300,1 (fla's cu_seqlens; each starts from its own state; sets T)")
	grad := fs.Bool("grad", false, "gdn-core, conv, attention, gated-rmsnorm: write gradients too (upstream gradients, every input's gradient)")
	bias := fs.Bool("bias", false, "conv with --grad: a per-channel bias before the SiLU, and its gradient dbias")
	l2 := fs.Bool("l2norm", false, "gdn-core with --grad: raw q and k, L2-normalised in the op (fla's use_qk_l2norm_in_kernel)")
	mem := addMemoryFlag(fs)
	over := map[string]*int{}
	for name, help := range map[string]string{
		"nk": "gdn-core: query/key heads", "nv": "gdn-core, gated-rmsnorm: value heads (a multiple of nk)",
		"dk": "gdn-core: key head dim", "dv": "gdn-core, gated-rmsnorm: value head dim",
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
		return usageErr("--op must be gdn-core, conv, attention, gated-rmsnorm, gdn-layer, attention-layer or decoder-layer, not %q", *op)
	}
	if *out == "" {
		return usageErr("missing --out")
	}
	if *seq < 1 {
		return usageErr("--seq must be at least 1, not %d", *seq)
	}
	if !slices.Contains(verify.DTypes, *dtype) {
		return usageErr("--dtype must be f32, bf16 or f16, not %q", *dtype)
	}
	var lens []int
	if *seqlens != "" {
		if *op != "gdn-core" && !(*grad && *op == "conv") {
			return usageErr("--seqlens applies to --op gdn-core only (and to conv with --grad)")
		}
		total := 0
		for _, f := range strings.Split(*seqlens, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > maxGoldenSeq {
				return usageErr("--seqlens %q: want positive lengths up to %d, comma-separated", *seqlens, maxGoldenSeq)
			}
			lens = append(lens, n)
			if total += n; total > maxGoldenSeq || len(lens) > maxGoldenSeqs {
				return usageErr("--seqlens: at most %d sequences and %d tokens in all", maxGoldenSeqs, maxGoldenSeq)
			}
		}
		if flagWasSet(fs, "seq") && *seq != total {
			return usageErr("--seq %d disagrees with --seqlens, which sum to %d", *seq, total)
		}
		*seq = total
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
	layer := slices.Contains(verify.LayerOps, *op)
	switch {
	case *op == "decoder-layer" && *kind != "gdn" && *kind != "attention":
		return usageErr("--kind must be gdn or attention, not %q", *kind)
	case *op != "decoder-layer" && flagWasSet(fs, "kind"): // gdn-layer and attention-layer name their mixer already
		return usageErr("--kind applies to --op decoder-layer only")
	}
	spec := verify.GoldenSpec{Op: *op, Shape: *shape, Config: cfg, Overrides: map[string]int{}, T: *seq, SeqLens: lens, DType: *dtype,
		Seed: *seed, ZeroState: *zeroState, Attention: *kind == "attention", Grad: *grad, L2Norm: *l2, Bias: *bias}
	for name, v := range over {
		spec.Overrides[name] = *v
	}
	spec.MemLimit, spec.MemSource = mem.limit()
	outOpts, err := outputFor("--out", *out)
	if err != nil {
		return err
	}
	start := time.Now()
	vec, what, err := verify.BuildGolden(spec)
	if err != nil {
		return err
	}
	if err := verify.WriteGolden(*out, vec, *shape, outOpts); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "golden: %s, %s inputs, seed %d → %s (%v)\n", what, *dtype, *seed, safeio.Clean(*out), time.Since(start).Round(time.Millisecond))
	width := 13
	if layer {
		width = 33
	}
	for _, t := range vec.Tensors {
		fmt.Fprintf(stdout, "  %-*s %s %v\n", width, t.Name, t.DType, t.Shape)
	}
	return nil
}
