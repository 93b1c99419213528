package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// TraceSchema names the Report's JSON layout; a change that breaks a
// reader bumps it.
const TraceSchema = "qwenref.trace.compare/1"

// Report is the outcome of the teacher-forced comparison; as JSON it is
// `qwenref trace --compare --json`'s output (docs/tolerances.md).
type Report struct {
	Schema    string  `json:"schema"`
	Backend   string  `json:"backend"`
	Reference string  `json:"reference"`
	Mode      string  `json:"mode"`
	Precision string  `json:"precision"`
	Tokens    int     `json:"tokens"`
	Layers    int     `json:"layers"`
	Compared  int     `json:"compared"`
	Failed    int     `json:"failed"`
	First     *Check  `json:"first_failure"` // points into Checks
	Verdict   string  `json:"verdict"`       // "agree", "differ" or "nothing-compared"
	Checks    []Check `json:"checks"`
}

// Check is one comparison of the report: a stage of a teacher-forced
// layer ("forced"), or a kernel run alone on the reference's recorded
// inputs to it ("isolated").
type Check struct {
	Stage        string  `json:"stage"`
	Mode         string  `json:"mode"` // "forced", "isolated" or "chained"
	RelL2        float64 `json:"rel_l2"`
	MaxAbsScaled float64 `json:"max_abs_scaled"`
	TolRelL2     float64 `json:"tol_rel_l2"`
	TolMaxAbs    float64 `json:"tol_max_abs_scaled"`
	N            int     `json:"reduction_length"`
	OK           bool    `json:"ok"`
}

func newCheck(stage, mode string, got, want []float32, bar Bar) Check {
	e := tensor.CompareStage(got, want)
	return Check{Stage: stage, Mode: mode, RelL2: finiteOr(e.RelL2), MaxAbsScaled: finiteOr(e.MaxAbsScaled),
		TolRelL2: bar.RelL2, TolMaxAbs: bar.MaxAbsScaled, N: bar.N, OK: e.Within(bar.Tolerance)}
}

// finiteOr keeps JSON valid: +Inf (a length mismatch or a NaN) becomes MaxFloat64.
func finiteOr(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return math.MaxFloat64
	}
	return v
}

// String is the check's line in trace --compare's text report.
func (c Check) String() string {
	verdict := "ok"
	if !c.OK {
		verdict = "DIFFERS"
	}
	return fmt.Sprintf("%-26s %-8s rel L2 %.2e ≤ %.1e  max-abs %.2e ≤ %.1e  %s",
		c.Stage, c.Mode, c.RelL2, c.TolRelL2, c.MaxAbsScaled, c.TolMaxAbs, verdict)
}

// Worst is the check closest to its relative L2 bar.
func Worst(checks []Check) Check {
	var w Check
	r := -1.0
	for _, c := range checks {
		if c.TolRelL2 > 0 && c.RelL2/c.TolRelL2 > r {
			w, r = c, c.RelL2/c.TolRelL2
		}
	}
	return w
}

// TeacherForced compares m on be with the reference trace or golden ref
// (read from refPath) for the token ids it was traced on: every layer is
// fed the reference's own input to it and every stage inside is compared;
// on a backend with host kernels the core kernels and the projections
// also run alone on the reference's recorded inputs to them. bf16 picks
// the bf16 error model (the caller knows the backend's precision). A
// reference traced on other ids is an error; a failing check is not (the
// report's verdict says it).
func TeacherForced(m *model.Model, be *model.Backend, ref *weights.Store, refPath string, ids []int, bf16 bool) (*Report, error) {
	if err := CheckTraceIDs(refPath, ids); err != nil {
		return nil, err
	}
	checks, err := forcedChecks(m, be, ref, ids, bf16)
	if err != nil {
		return nil, err
	}
	rep := &Report{Schema: TraceSchema, Backend: be.Name, Reference: refPath, Mode: "teacher-forced", Precision: "f32",
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
	return rep, nil
}

// refRow reads a stage of the reference and returns its row 0 (a batched
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

// forcedChecks returns the checks of TeacherForced in execution order.
func forcedChecks(m *model.Model, be *model.Backend, ref *weights.Store, ids []int, bf16 bool) ([]Check, error) {
	cfg := m.Config
	t, h := len(ids), cfg.HiddenSize
	head := headPaths(m, t)
	var checks []Check
	emb := make([]float32, t*h)
	for i, id := range ids {
		m.Embed.Row(id, emb[i*h:(i+1)*h])
	}
	if want, ok, err := refRow(ref, "embeddings", t*h); err != nil {
		return nil, err
	} else if ok {
		checks = append(checks, newCheck("embeddings", "forced", emb, want, BarFor(head["embeddings"], bf16)))
	}
	// One runner (a device-resident one for such a backend), reset before
	// each layer so every layer starts from a fresh sequence, as the
	// reference's did.
	runner, err := model.NewRunner(m, be, 1)
	if err != nil {
		return nil, err
	}
	defer runner.Close()
	for li := range m.Blocks {
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
		iso := map[string][]Check{}
		if hostKernels(be) {
			if iso, err = isolatedChecks(m, li, be, ref, t, bf16); err != nil {
				return nil, err
			}
		}
		paths := blockPaths(m, li, t)
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
				checks = append(checks, newCheck(name, "forced", got[stage], want, BarFor(pathOf(paths, stage), bf16)))
			}
		}
	}
	if hostKernels(be) {
		checks = append(checks, headChecks(m, be, ref, t, bf16, head)...)
	}
	return checks, nil
}

// headPaths maps the model's own stages (embeddings, final_norm, logits)
// to their paths from the stage before them.
func headPaths(m *model.Model, t int) map[string]tensor.StagePath {
	paths := map[string]tensor.StagePath{}
	for _, s := range m.Stages(t) {
		switch s.Name {
		case "embeddings", "final_norm", "logits":
			paths[s.Name] = s.Path
		}
	}
	return paths
}

// hostKernels reports whether be has host-callable kernels for every part
// (a device-resident backend runs whole layers only: its layers are
// checked teacher-forced, without the isolated checks).
func hostKernels(be *model.Backend) bool {
	return be.MatMul != nil && be.Conv != nil && be.Delta != nil && be.Attn != nil
}

// headChecks compare final_norm (from the reference's last layer output)
// and logits (from its final_norm).
func headChecks(m *model.Model, be *model.Backend, ref *weights.Store, t int, bf16 bool, paths map[string]tensor.StagePath) []Check {
	h, v := m.Config.HiddenSize, m.Config.VocabSize
	var checks []Check
	last, ok, err := refRow(ref, fmt.Sprintf("layers.%d.output", len(m.Blocks)-1), t*h)
	if err != nil || !ok {
		return nil
	}
	if want, ok, err := refRow(ref, "final_norm", t*h); err == nil && ok {
		y := make([]float32, t*h)
		if norm.RMSNormOnePlus(y, last, m.FinalNorm, float32(m.Config.RMSNormEps)) == nil {
			checks = append(checks, newCheck("final_norm", "forced", y, want, BarFor(paths["final_norm"], bf16)))
		}
		if wantL, ok, err := refRow(ref, "logits", t*v); err == nil && ok {
			lg := make([]float32, t*v)
			if be.MatMul.MatMulT(lg, want, t, m.LMHead) == nil {
				checks = append(checks, newCheck("logits", "isolated", lg, wantL, BarFor(paths["logits"], bf16)))
			}
		}
	}
	return checks
}

// isolatedChecks runs the backend's kernels of layer li alone on the
// reference's recorded inputs to them (zero initial states, as at the
// start of the traced sequence), keyed by the stage they produce.
// Isolated, a stage's path is the one kernel: its reduction length (the
// kernel's contract: a product's fan-in, the conv's taps, attention's
// d_h + S, the recurrence's T·d_k) and at most one product.
func isolatedChecks(m *model.Model, li int, be *model.Backend, ref *weights.Store, t int, bf16 bool) (map[string][]Check, error) {
	blk := m.Blocks[li]
	prefix := "layers." + strconv.Itoa(li) + "."
	out := map[string][]Check{}
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
	add := func(stage string, got []float32, n int, err error) {
		if err != nil {
			failed = fmt.Errorf("%s%s in isolation: %w", prefix, stage, err)
			return
		}
		if want := read(stage, len(got)); want != nil {
			bar := BarFor(tensor.StagePath{Reduction: n, Amp: 1, Products: 1}, bf16)
			out[prefix+stage] = append(out[prefix+stage], newCheck(prefix+stage, "isolated", got, want, bar))
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
	if a := blk.Attn(); a != nil {
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
	g := blk.GDN()
	if g == nil { // a mixer without isolated checks
		return out, failed
	}
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
		add("conv_out", y, d.ConvK, be.Conv.Forward(y, x, g.W.ConvW, conv1d.Dims{T: t, C: c, K: d.ConvK}, make([]float32, d.ConvK*c)))
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
