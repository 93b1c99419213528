package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// The error model trace --compare holds each stage to (docs/tolerances.md).
//
// A stage computed in float32 from exact inputs through reductions of
// total length n has a relative error of about u·√n (u = 2⁻²⁴, errors of
// random sign add in quadrature). The bar is traceSafety·u·√n·amp, where
// n sums the reduction lengths on the stage's path from its fed input
// (the layer input when the layer is teacher-forced, the stage's own
// recorded inputs when it runs in isolation) and amp is 2 after the gated
// RMSNorm (it divides by a small RMS). For a float32 backend the bar is
// never looser than the golden tests' (tensor.GoldenTolerance). A bf16
// backend rounds the activations and weights of every matrix product to
// bf16 (u = 2⁻⁸); those roundings dominate and add in quadrature, so its
// bar is traceSafetyBF16·2⁻⁸·√m·amp, with m the number of products on the
// stage's path (at least 1), independent of n.
const (
	unitF32         = 1.0 / (1 << 24)
	unitBF16        = 1.0 / (1 << 8)
	traceSafety     = 8  // head-room over the √n estimate
	traceSafetyBF16 = 4  // head-room over one bf16 rounding
	maxAbsOverRelL2 = 10 // the scaled max-abs bar is this multiple of the relative L2 bar, as in the golden tests
)

// stageBar is the tolerance of one check and the numbers it came from.
type stageBar struct {
	tensor.Tolerance
	N   int     // reduction length on the stage's path
	Amp float64 // amplification of the stages it follows
}

// pathShape is what the error model needs of a stage's path.
type pathShape struct {
	n        int     // reduction length
	amp      float64 // amplification (2 after the gated RMSNorm)
	products int     // matrix products (bf16-rounded on a bf16 backend)
}

func barFor(p pathShape, bf16 bool) stageBar {
	n, amp := p.n, p.amp
	if bf16 {
		rel := traceSafetyBF16 * unitBF16 * math.Sqrt(float64(max(p.products, 1))) * amp
		return stageBar{Tolerance: tensor.Tolerance{RelL2: rel, MaxAbsScaled: maxAbsOverRelL2 * rel}, N: n, Amp: amp}
	}
	rel := math.Min(tensor.GoldenRelL2, traceSafety*unitF32*math.Sqrt(float64(max(n, 1)))*amp)
	abs := math.Min(tensor.GoldenMaxAbs, maxAbsOverRelL2*rel)
	return stageBar{Tolerance: tensor.Tolerance{RelL2: rel, MaxAbsScaled: abs}, N: n, Amp: amp}
}

// pathLength is the path shape of a stage from the layer input, for a
// layer teacher-forced on T tokens.
func pathLength(cfg *model.Config, kind model.LayerKind, stage string, t int) pathShape {
	h, inter := cfg.HiddenSize, cfg.IntermediateSize
	proj := 2 * h // the input RMSNorm's sum, then the projection's dot product
	if kind == model.FullAttention {
		d := cfg.HeadDim
		core := proj + d + d + t // q/k norm, q·k, the softmax sum over ≤ T keys
		mixer := core + cfg.NumHeads*d
		switch stage {
		case "mixer_in":
			return pathShape{h, 1, 0}
		case "q_proj", "k_proj", "v_proj":
			return pathShape{proj, 1, 1}
		case "q_rope", "k_rope":
			return pathShape{proj + d, 1, 1}
		case "attn_core", "gated":
			return pathShape{core, 1, 1}
		case "mixer_out":
			return pathShape{mixer, 1, 2}
		case "mlp_in":
			return pathShape{mixer + h, 1, 2}
		}
		return pathShape{mixer + proj + inter, 1, 4} // mlp_out, output
	}
	k, dk, dv := cfg.LinearConvKernel, cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	core := proj + k + dk + t*dk // conv taps, the L2 norm, the recurrence over T rank-one updates
	mixer := core + dv + cfg.LinearNumValueHeads*dv
	switch stage {
	case "mixer_in":
		return pathShape{h, 1, 0}
	case "qkv_proj", "z_proj", "b_proj", "a_proj", "g", "beta":
		return pathShape{proj, 1, 1}
	case "conv_out", "v":
		return pathShape{proj + k, 1, 1}
	case "q_l2", "k_l2":
		return pathShape{proj + k + dk, 1, 1}
	case "core_out", "final_state":
		return pathShape{core, 1, 1}
	case "gated_norm_out":
		return pathShape{core + dv, 2, 2}
	case "mixer_out":
		return pathShape{mixer, 2, 3}
	case "mlp_in":
		return pathShape{mixer + h, 2, 3}
	}
	return pathShape{mixer + proj + inter, 2, 5}
}

// traceCheck is one comparison of trace --compare, as in its JSON report.
type traceCheck struct {
	Stage        string  `json:"stage"`
	Mode         string  `json:"mode"` // "forced", "isolated" or "chained"
	RelL2        float64 `json:"rel_l2"`
	MaxAbsScaled float64 `json:"max_abs_scaled"`
	TolRelL2     float64 `json:"tol_rel_l2"`
	TolMaxAbs    float64 `json:"tol_max_abs_scaled"`
	N            int     `json:"reduction_length"`
	OK           bool    `json:"ok"`
}

func newCheck(stage, mode string, got, want []float32, bar stageBar) traceCheck {
	e := tensor.CompareStage(got, want)
	return traceCheck{Stage: stage, Mode: mode, RelL2: finiteOr(e.RelL2), MaxAbsScaled: finiteOr(e.MaxAbsScaled),
		TolRelL2: bar.RelL2, TolMaxAbs: bar.MaxAbsScaled, N: bar.N, OK: e.Within(bar.Tolerance)}
}

// finiteOr keeps JSON valid: +Inf (a length mismatch or a NaN) becomes MaxFloat64.
func finiteOr(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return math.MaxFloat64
	}
	return v
}

func (c traceCheck) String() string {
	verdict := "ok"
	if !c.OK {
		verdict = "DIFFERS"
	}
	return fmt.Sprintf("%-26s %-8s rel L2 %.2e ≤ %.1e  max-abs %.2e ≤ %.1e  %s",
		c.Stage, c.Mode, c.RelL2, c.TolRelL2, c.MaxAbsScaled, c.TolMaxAbs, verdict)
}

// refRows reads a stage of the reference and returns its row 0 (a batched
// golden holds B rows); ok is false when the stage is absent.
func refRow(ref *weights.Store, name string, n int) ([]float32, bool, error) {
	if _, in := ref.Info(name); !in {
		return nil, false, nil
	}
	data, shape, err := ref.Float32(name)
	if err != nil {
		return nil, false, err
	}
	if n <= 0 || len(data) < n || len(data)%n != 0 {
		return nil, false, fmt.Errorf("%s has shape %v in the reference, which does not hold %d values per row: was it written for these ids and this model?", name, shape, n)
	}
	return data[:n], true, nil
}

// forcedCompare feeds every layer the reference's own input to it and
// compares every stage inside; the core kernels (and the projections)
// also run in isolation on the reference's recorded inputs to them. It
// returns the checks in execution order.
func forcedCompare(m *model.Model, be *model.Backend, ref *weights.Store, ids []int, bf16 bool) ([]traceCheck, error) {
	cfg := m.Config
	t, h := len(ids), cfg.HiddenSize
	var checks []traceCheck
	emb := make([]float32, t*h)
	for i, id := range ids {
		m.Embed.Row(id, emb[i*h:(i+1)*h])
	}
	if want, ok, err := refRow(ref, "embeddings", t*h); err != nil {
		return nil, err
	} else if ok {
		checks = append(checks, newCheck("embeddings", "forced", emb, want, barFor(pathShape{1, 1, 0}, bf16)))
	}
	// One runner (a device-resident one for such a backend), reset before
	// each layer so every layer starts from a fresh sequence, as the
	// reference's did.
	runner, err := model.NewRunner(m, be, 1)
	if err != nil {
		return nil, err
	}
	defer runner.Close()
	for li, blk := range m.Blocks {
		prefix := "layers." + strconv.Itoa(li) + "."
		x, ok, err := refRow(ref, prefix+"input", t*h)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var order []string
		got := map[string][]float32{}
		rec := func(stage string, v *tensor.Tensor) {
			if _, dup := got[stage]; !dup {
				order = append(order, stage)
			}
			got[stage] = slices.Clone(v.Data)
		}
		if err := runner.Reset(); err != nil {
			return nil, err
		}
		if _, err := runner.Layer(li, x, t, rec); err != nil {
			return nil, err
		}
		iso := map[string][]traceCheck{}
		if hostKernels(be) {
			if iso, err = isolatedChecks(m, li, be, ref, t, bf16); err != nil {
				return nil, err
			}
		}
		for _, stage := range order {
			if stage == "input" {
				continue
			}
			name := prefix + stage
			checks = append(checks, iso[name]...)
			want, ok, err := refRow(ref, name, len(got[stage]))
			if err != nil {
				return nil, err
			}
			if ok {
				checks = append(checks, newCheck(name, "forced", got[stage], want, barFor(pathLength(cfg, blk.Kind, stage, t), bf16)))
			}
		}
	}
	if hostKernels(be) {
		checks = append(checks, headChecks(m, be, ref, t, bf16)...)
	}
	return checks, nil
}

// hostKernels reports whether be has host-callable kernels for every part
// (a device-resident backend runs whole layers only: its layers are
// checked teacher-forced, without the isolated checks).
func hostKernels(be *model.Backend) bool {
	return be.MatMul != nil && be.Conv != nil && be.Delta != nil && be.Attn != nil
}

// headChecks compare final_norm (from the reference's last layer output)
// and logits (from its final_norm).
func headChecks(m *model.Model, be *model.Backend, ref *weights.Store, t int, bf16 bool) []traceCheck {
	h, v := m.Config.HiddenSize, m.Config.VocabSize
	var checks []traceCheck
	last, ok, err := refRow(ref, fmt.Sprintf("layers.%d.output", len(m.Blocks)-1), t*h)
	if err != nil || !ok {
		return nil
	}
	if want, ok, err := refRow(ref, "final_norm", t*h); err == nil && ok {
		y := make([]float32, t*h)
		if norm.RMSNormOnePlus(y, last, m.FinalNorm, float32(m.Config.RMSNormEps)) == nil {
			checks = append(checks, newCheck("final_norm", "forced", y, want, barFor(pathShape{h, 1, 0}, bf16)))
		}
		if wantL, ok, err := refRow(ref, "logits", t*v); err == nil && ok {
			lg := make([]float32, t*v)
			if be.MatMul.MatMulT(lg, want, t, m.LMHead) == nil {
				checks = append(checks, newCheck("logits", "isolated", lg, wantL, barFor(pathShape{h, 1, 1}, bf16)))
			}
		}
	}
	return checks
}

// isolatedChecks runs the backend's kernels of layer li alone on the
// reference's recorded inputs to them (zero initial states, as at the
// start of the traced sequence), keyed by the stage they produce.
func isolatedChecks(m *model.Model, li int, be *model.Backend, ref *weights.Store, t int, bf16 bool) (map[string][]traceCheck, error) {
	blk := m.Blocks[li]
	prefix := "layers." + strconv.Itoa(li) + "."
	out := map[string][]traceCheck{}
	var failed error
	read := func(stage string, n int) []float32 {
		if failed != nil {
			return nil
		}
		x, ok, err := refRow(ref, prefix+stage, n)
		if err != nil {
			failed = err
		}
		if !ok {
			return nil
		}
		return x
	}
	// Isolated, a stage's path is the one kernel: its reduction length and
	// at most one product.
	add := func(stage string, got []float32, n int, err error) {
		if err != nil {
			failed = fmt.Errorf("%s%s in isolation: %w", prefix, stage, err)
			return
		}
		if want := read(stage, len(got)); want != nil {
			out[prefix+stage] = append(out[prefix+stage], newCheck(prefix+stage, "isolated", got, want, barFor(pathShape{n, 1, 1}, bf16)))
		}
	}
	h := m.Config.HiddenSize
	project := func(in []float32, w *tensor.Matrix, stage string) {
		if in == nil {
			return
		}
		y := make([]float32, t*w.Rows)
		add(stage, y, w.Cols, be.MatMul.MatMulT(y, in, t, w))
	}
	if blk.Kind == model.FullAttention {
		a := blk.Attn
		d := a.Dims
		mixIn := read("mixer_in", t*h)
		project(mixIn, a.W.QProj, "q_proj")
		project(mixIn, a.W.KProj, "k_proj")
		project(mixIn, a.W.VProj, "v_proj")
		q, k, v := read("q_rope", t*d.NH*d.D), read("k_rope", t*d.NKV*d.D), read("v_proj", t*d.NKV*d.D)
		if q != nil && k != nil && v != nil {
			o := make([]float32, t*d.NH*d.D)
			err := be.Attn.Forward(o, q, k, v, attention.Dims{T: t, S: t, NH: d.NH, NKV: d.NKV, D: d.D}, float32(1/math.Sqrt(float64(d.D))))
			add("attn_core", o, d.D+t, err)
		}
		project(read("gated", t*d.NH*d.D), a.W.OProj, "mixer_out")
		return out, failed
	}
	g := blk.GDN
	d := g.Dims
	c := d.ConvDim()
	mixIn := read("mixer_in", t*h)
	for _, p := range []struct {
		w    *tensor.Matrix
		name string
	}{{g.W.InProjQKV, "qkv_proj"}, {g.W.InProjZ, "z_proj"}, {g.W.InProjB, "b_proj"}, {g.W.InProjA, "a_proj"}} {
		project(mixIn, p.w, p.name)
	}
	if x := read("qkv_proj", t*c); x != nil {
		y := make([]float32, t*c)
		add("conv_out", y, d.ConvK, be.Conv.Forward(y, x, t, c, g.W.ConvW, d.ConvK, make([]float32, d.ConvK*c)))
	}
	qk, hv := d.NK*d.DK, d.NV*d.DV
	q, k, v := read("q_l2", t*qk), read("k_l2", t*qk), read("v", t*hv)
	gate, beta := read("g", t*d.NV), read("beta", t*d.NV)
	if q != nil && k != nil && v != nil && gate != nil && beta != nil {
		scale := float32(1 / math.Sqrt(float64(d.DK)))
		qs := make([]float32, len(q))
		for i := range q {
			qs[i] = q[i] * scale
		}
		o, st := make([]float32, t*hv), make([]float32, d.NV*d.DK*d.DV)
		err := be.Delta.Forward(o, qs, k, v, gate, beta, gateddelta.Dims{T: t, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}, st)
		add("core_out", o, t*d.DK, err)
		add("final_state", st, t*d.DK, err)
	}
	project(read("gated_norm_out", t*hv), g.W.OutProj, "mixer_out")
	return out, failed
}

// isBF16Backend reports whether a backend spec rounds activations to bf16:
// its name says bf16, or it is a cuda backend (cuBLAS bf16 tensor cores).
func isBF16Backend(spec string) bool {
	return strings.Contains(spec, "bf16") || strings.Contains(strings.ReplaceAll(spec, "cuda-fp32", ""), "cuda")
}

// traceReport is trace --compare --json's output (docs/tolerances.md).
type traceReport struct {
	Schema    string       `json:"schema"`
	Backend   string       `json:"backend"`
	Reference string       `json:"reference"`
	Mode      string       `json:"mode"`
	Precision string       `json:"precision"`
	Tokens    int          `json:"tokens"`
	Layers    int          `json:"layers"`
	Compared  int          `json:"compared"`
	Failed    int          `json:"failed"`
	First     *traceCheck  `json:"first_failure"`
	Verdict   string       `json:"verdict"` // "agree", "differ" or "nothing-compared"
	Checks    []traceCheck `json:"checks"`
}

// traceSchema names the JSON report's layout; a change that breaks a
// reader bumps it.
const traceSchema = "qwenref.trace.compare/1"

// reportForced runs the teacher-forced comparison and reports it: exit 4
// (via exitStatus) at a failing stage, an error when nothing compared.
func reportForced(w io.Writer, m *model.Model, be *model.Backend, ref *weights.Store, refPath string, ids []int, bf16, asJSON, all bool, layer int) error {
	if err := checkRefIDs(refPath, ids); err != nil {
		return fmt.Errorf("--compare %s: %w", refPath, err)
	}
	checks, err := forcedCompare(m, be, ref, ids, bf16)
	if err != nil {
		return fmt.Errorf("--compare %s: %w", refPath, err)
	}
	rep := traceReport{Schema: traceSchema, Backend: be.Name, Reference: refPath, Mode: "teacher-forced", Precision: "f32",
		Tokens: len(ids), Layers: len(m.Blocks), Compared: len(checks), Verdict: "agree", Checks: checks}
	if bf16 {
		rep.Precision = "bf16"
	}
	for i := range checks {
		if !checks[i].OK {
			rep.Failed++
			if rep.First == nil {
				rep.First = &checks[i]
			}
		}
	}
	switch {
	case len(checks) == 0:
		rep.Verdict = "nothing-compared"
	case rep.First != nil:
		rep.Verdict = "differ"
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "trace --compare: %d tokens on %s against %s; %d layers (%s), each teacher-forced; %s error model\n",
			len(ids), be.Name, refPath, len(m.Blocks), layerKinds(m), rep.Precision)
		prefix := fmt.Sprintf("layers.%d.", layer)
		for i, c := range checks {
			if all || strings.HasPrefix(c.Stage, prefix) || (rep.First == &checks[i]) {
				mark := ""
				if rep.First == &checks[i] {
					mark = "   ← first failure"
				}
				fmt.Fprintf(w, "%s%s\n", c, mark)
			}
		}
		worst := worstCheck(checks)
		switch rep.Verdict {
		case "agree":
			fmt.Fprintf(w, "all %d checks agree (worst: %s, rel L2 %.2e of its bar %.1e)\n", len(checks), worst.Stage, worst.RelL2, worst.TolRelL2)
		case "differ":
			fmt.Fprintf(w, "%d of %d checks differ; the first is %s (%s): rel L2 %.3e (bar %.1e), scaled max-abs %.3e (bar %.1e)\n",
				rep.Failed, len(checks), rep.First.Stage, rep.First.Mode, rep.First.RelL2, rep.First.TolRelL2, rep.First.MaxAbsScaled, rep.First.TolMaxAbs)
		}
	}
	switch rep.Verdict {
	case "nothing-compared":
		return fmt.Errorf("--compare %s holds no stage this model produces (layers.N.input is needed to teacher-force a layer): nothing was compared; is it a trace or golden of this model?", refPath)
	case "differ":
		return exitStatus(4)
	}
	return nil
}

// worstCheck is the check closest to its relative L2 bar.
func worstCheck(checks []traceCheck) traceCheck {
	var w traceCheck
	r := -1.0
	for _, c := range checks {
		if c.TolRelL2 > 0 && c.RelL2/c.TolRelL2 > r {
			w, r = c, c.RelL2/c.TolRelL2
		}
	}
	return w
}

// checkRefIDs refuses a trace written for other token ids (the file's
// "ids" metadata); goldens carry none and are checked by shape alone.
func checkRefIDs(path string, ids []int) error {
	meta, err := readMetadata(path)
	if err != nil {
		return err
	}
	got, ok := meta["ids"]
	if !ok {
		return nil
	}
	want := make([]string, len(ids))
	for i, id := range ids {
		want[i] = strconv.Itoa(id)
	}
	if got != strings.Join(want, ",") {
		return fmt.Errorf("it was traced on ids %s, not %s", shorten(got, 60), shorten(strings.Join(want, ","), 60))
	}
	return nil
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
