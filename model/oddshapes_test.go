package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// The odd-shapes sweep runs random models of valid but unusual shapes
// through the whole model on the naive backend (the truth) and on the fast
// CPU backends, and holds the fast ones to the golden bars, stage by stage:
//
//   - teacher-forced: each layer is fed naive's own input to it
//     (Session.Layer) and every stage it records is compared with naive's,
//     as `qwenref trace --compare` does (docs/tolerances.md: chained drift
//     over depth is float32 noise amplified by the random model, not a
//     kernel's error); the LM head is fed naive's final norm;
//   - chained: the unrecorded forward (which lends pooled, unzeroed
//     buffers, poisoned with NaN here) against naive's logits;
//   - cached: each layer fed in pieces (a prefill, single tokens, a
//     multi-token continuation: the chunked core from an initial state, the
//     conv from its cached rows, attention over its KV cache), its outputs
//     against naive's full forward, teacher-forced;
//   - batched: a two-row Runner reproduces each row's own session bit for
//     bit.
//
// The default run is a curated set (under a minute on two cores, with the
// lower kernel levels re-run in child processes on a subset); set
// QWENREF_ODDSHAPES=full for every case at every length on every fast
// backend.

// oddShape is one config of the sweep, written as the config.json keys.
type oddShape struct {
	Name                   string
	Family                 string // "" dense qwen3_5_text, "moe" qwen3_5_moe_text, "next" qwen3_next
	H, I, V                int
	Layers                 string // one letter per layer: L linear attention (GDN), A full attention
	NH, NKV, DH            int
	NK, NV, DK, DV, K      int
	Rot                    float64 // partial_rotary_factor; 0 means 0.25
	Tied                   bool
	E, TopK, MoEI, SharedI int
	NormTopK               *bool
	SparseStep             int
	MLPOnly                []int
	T                      int // the default run's sequence length
}

func (s oddShape) json() []byte {
	var lt []string
	for _, c := range s.Layers {
		if c == 'A' {
			lt = append(lt, "full_attention")
		} else {
			lt = append(lt, "linear_attention")
		}
	}
	rot := s.Rot
	if rot == 0 {
		rot = 0.25
	}
	m := map[string]any{
		"model_type": "qwen3_5_text", "vocab_size": s.V, "hidden_size": s.H,
		"num_hidden_layers": len(lt), "layer_types": lt,
		"num_attention_heads": s.NH, "num_key_value_heads": s.NKV, "head_dim": s.DH,
		"linear_num_key_heads": s.NK, "linear_num_value_heads": s.NV,
		"linear_key_head_dim": s.DK, "linear_value_head_dim": s.DV, "linear_conv_kernel_dim": s.K,
		"rms_norm_eps": 1e-6, "rope_theta": 1e6, "partial_rotary_factor": rot,
		"tie_word_embeddings": s.Tied,
	}
	if s.I > 0 {
		m["intermediate_size"] = s.I
	}
	switch s.Family {
	case "moe":
		m["model_type"] = "qwen3_5_moe_text"
	case "next":
		m["model_type"] = "qwen3_next"
	}
	if s.E > 0 {
		m["num_experts"], m["num_experts_per_tok"] = s.E, s.TopK
		m["moe_intermediate_size"], m["shared_expert_intermediate_size"] = s.MoEI, s.SharedI
		if s.NormTopK != nil {
			m["norm_topk_prob"] = *s.NormTopK
		}
		if s.SparseStep > 0 {
			m["decoder_sparse_step"] = s.SparseStep
		}
		if s.MLPOnly != nil {
			m["mlp_only_layers"] = s.MLPOnly
		}
	}
	js, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return js
}

// oddBase is the shape every case starts from: nothing a multiple of 8,
// d_k ≠ d_v, two value heads per key head, GQA 2, a rotary dim of 6.
var oddBase = oddShape{H: 40, I: 56, V: 37, Layers: "LA", NH: 2, NKV: 1, DH: 24, NK: 2, NV: 4, DK: 12, DV: 20, K: 4}

// oddLengths are the sequence lengths around the 64-token chunk (and the
// 16/32/128 variants' chunks), and decode-sized ones.
var oddLengths = []int{63, 64, 65, 127, 129, 1, 2}

func oddShapes() []oddShape {
	tr, fa := true, false
	var out []oddShape
	add := func(name string, f func(*oddShape)) {
		s := oddBase
		s.Name = name
		f(&s)
		if s.T == 0 {
			s.T = oddLengths[len(out)%len(oddLengths)]
		}
		out = append(out, s)
	}
	// Hidden sizes that are no multiple of 8, 16 or 64.
	for _, h := range []int{1, 3, 24, 72, 100} {
		add(fmt.Sprintf("hidden_size=%d", h), func(s *oddShape) { s.H, s.I = h, h+13 })
	}
	// Linear key/value head dims, unequal and odd, and value heads 1, 2
	// and 3 × the key heads.
	for _, c := range []struct{ nk, nv, dk, dv int }{
		{2, 4, 8, 24}, {2, 2, 12, 20}, {1, 3, 48, 16}, {1, 1, 1, 1}, {3, 3, 2, 3}, {1, 2, 3, 17},
		{1, 3, 17, 33}, {2, 6, 33, 17}, {1, 1, 65, 2}, {1, 2, 130, 3}, {2, 2, 3, 130}, {1, 3, 65, 65},
	} {
		add(fmt.Sprintf("gdn nk=%d nv=%d dk=%d dv=%d", c.nk, c.nv, c.dk, c.dv), func(s *oddShape) {
			s.NK, s.NV, s.DK, s.DV = c.nk, c.nv, c.dk, c.dv
			s.Layers = "LAL"
		})
	}
	// Attention head dims 8..272, partial rotary factors, GQA 1 and all
	// heads on one KV head.
	for _, c := range []struct {
		nh, nkv, dh int
		rot         float64
	}{
		{2, 1, 8, 0.25}, {2, 2, 10, 1}, {3, 1, 20, 0.5}, {4, 4, 40, 0}, {2, 1, 72, 1}, {6, 1, 100, 0.5},
		{1, 1, 136, 0}, {3, 3, 200, 0.25}, {2, 1, 256, 0.25}, {1, 1, 264, 0.5}, {2, 2, 272, 1}, {5, 1, 48, 0.5},
	} {
		add(fmt.Sprintf("attn nh=%d nkv=%d dh=%d rot=%g", c.nh, c.nkv, c.dh, c.rot), func(s *oddShape) {
			s.NH, s.NKV, s.DH, s.Rot = c.nh, c.nkv, c.dh, c.rot
			s.Layers = "ALA"
		})
	}
	// Conv kernel sizes 1..8 (4 is the base).
	for _, k := range []int{1, 2, 3, 5, 6, 7, 8} {
		add(fmt.Sprintf("conv K=%d", k), func(s *oddShape) { s.K = k; s.Layers = "L" })
	}
	// Depths 1..6, every kind of layer_types pattern, tied and untied.
	for i, l := range []string{"L", "A", "AA", "LL", "AL", "LLLA", "ALLAL", "LLLLLL", "AAAAAA", "LAALLA"} {
		add("layers="+l, func(s *oddShape) { s.Layers, s.Tied = l, i%2 == 0 })
	}
	add("vocab_size=1", func(s *oddShape) { s.V, s.Tied = 1, true })
	add("vocab_size=2", func(s *oddShape) { s.V = 2 })
	add("intermediate_size=1", func(s *oddShape) { s.I = 1 })
	// qwen3_5_moe: experts 1..9, top-k 1..E, shared expert sizes.
	for _, c := range []struct{ e, k, sh int }{{1, 1, 1}, {2, 2, 5}, {3, 1, 1}, {5, 2, 13}, {9, 9, 7}, {9, 4, 40}, {7, 7, 2}} {
		add(fmt.Sprintf("moe E=%d k=%d shared=%d", c.e, c.k, c.sh), func(s *oddShape) {
			s.Family, s.I, s.E, s.TopK, s.MoEI, s.SharedI = "moe", 0, c.e, c.k, 13, c.sh
			s.Layers = "LA"
		})
	}
	// qwen3_next: norm_topk_prob, decoder_sparse_step, mlp_only_layers,
	// the fused projections with 1, 2 and 3 value heads per key head.
	for _, c := range []struct {
		ntk  *bool
		step int
		only []int
	}{{&tr, 1, nil}, {&fa, 1, []int{}}, {&tr, 2, []int{0}}, {&fa, 3, []int{1, 2}}, {&fa, 2, nil}} {
		add(fmt.Sprintf("next norm_topk_prob=%v step=%d mlp_only=%v", *c.ntk, c.step, c.only), func(s *oddShape) {
			s.Family, s.Layers, s.E, s.TopK, s.MoEI, s.SharedI = "next", "LLAL", 5, 3, 11, 9
			s.NormTopK, s.SparseStep, s.MLPOnly = c.ntk, c.step, c.only
		})
	}
	add("next r=3 dv=17", func(s *oddShape) {
		s.Family, s.E, s.TopK, s.MoEI, s.SharedI, s.NK, s.NV, s.DK, s.DV = "next", 4, 2, 7, 5, 2, 6, 3, 17
	})
	add("next r=1", func(s *oddShape) { s.Family, s.E, s.TopK, s.MoEI, s.SharedI, s.NK, s.NV = "next", 4, 4, 7, 5, 3, 3 })
	// Wide enough that the work buffers come from the pool (≥ 64K floats)
	// and the products split K and run in parallel.
	add("pooled", func(s *oddShape) {
		s.H, s.I, s.V, s.NK, s.NV, s.DK, s.DV, s.NH, s.NKV, s.DH, s.Layers, s.T = 520, 1030, 300, 4, 8, 64, 72, 3, 3, 136, "LAL", 130
	})
	return out
}

// oddFP32Backends are the float32 backends held to the golden bars against
// naive; the default run takes chunked and one other per case, in turn.
var oddFP32Backends = []string{
	"chunked", "chunked:delta=recurrent", "chunked:delta=chunked16", "chunked:delta=chunked32",
	"chunked:delta=chunked128", "naive:matmul=chunked:conv=chunked", "naive:attn=chunked:delta=chunked", "naive:moe=grouped",
}

func oddFull() bool { return os.Getenv("QWENREF_ODDSHAPES") == "full" }

// oddTol is the float32 bar: the golden bars in the default run. The full
// sweep (every length and backend on every case, 3,000 comparisons)
// allows 4× that: a few of its stages are ill-conditioned enough that
// naive's own rounding moves them past 1e-5 (the RMSNorm of hidden_size 1
// near zero, the one shared-expert gate logit of a T = 1 row, six GDN
// layers chained), with the same error on every delta kernel, while a
// wrong kernel errs by 1e-3 or more.
func oddTol() tensor.Tolerance {
	if oddFull() {
		return tensor.Tolerance{RelL2: 4 * tensor.GoldenRelL2, MaxAbsScaled: 4 * tensor.GoldenMaxAbs}
	}
	return tensor.GoldenTolerance
}

// oddChild marks the child runs of TestOddShapesKernelLevels.
const oddChild = "QWENREF_ODDSHAPES_CHILD"

func oddIDs(n, v, seed int) []int {
	ids := make([]int, n)
	x := uint32(seed)*2654435761 + 12345
	for i := range ids {
		x = x*1664525 + 1013904223
		ids[i] = int(x>>8) % v
	}
	return ids
}

// oddRecord is every stage of one recorded forward, by name.
type oddRecord struct {
	names  []string
	stages map[string][]float32
}

func (r *oddRecord) recorder(prefix string) tensor.Recorder {
	if r.stages == nil {
		r.stages = map[string][]float32{}
	}
	return func(stage string, x *tensor.Tensor) {
		r.names = append(r.names, prefix+stage)
		r.stages[prefix+stage] = slices.Clone(x.Data)
	}
}

// guarded runs f, turning a panic into an error, so one bad shape reports
// itself instead of ending the sweep.
func guarded(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// poisonPool fills the work-buffer pool with NaN for every class up to
// maxFloats, so a kernel that leaves part of a pooled output unwritten
// shows (bufpool lends buffers with their last user's contents).
func poisonPool(maxFloats int) {
	var held [][]float32
	for n := 1 << 16; n <= maxFloats; n += n / 4 {
		b := bufpool.Get(n)
		b = b[:cap(b)]
		for i := range b {
			b[i] = float32(math.NaN())
		}
		held = append(held, b)
	}
	for _, b := range held {
		bufpool.Put(b)
	}
}

// oddCompare fails t when got is not within tol of want.
// oddWorst is the comparison closest to its bar so far (logged: how much
// room the bars leave on this machine).
var oddWorst struct {
	ratio float64
	what  string
}

func oddCompare(t *testing.T, tol tensor.Tolerance, got, want []float32, format string, args ...any) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", fmt.Sprintf(format, args...), len(got), len(want))
		return false
	}
	e := tensor.CompareStage(got, want)
	if r := max(e.RelL2/tol.RelL2, e.MaxAbsScaled/tol.MaxAbsScaled); r > oddWorst.ratio {
		oddWorst.ratio, oddWorst.what = r, fmt.Sprintf(format, args...)
	}
	if !e.Within(tol) {
		t.Errorf("%s: rel L2 %.3g (bar %.0e), scaled max-abs %.3g (bar %.0e)", fmt.Sprintf(format, args...), e.RelL2, tol.RelL2, e.MaxAbsScaled, tol.MaxAbsScaled)
		return false
	}
	return true
}

// oddCheckTeacherForced feeds every layer of m on backend be naive's input
// to it and compares each stage the layer records, then the LM head on
// naive's final norm.
func oddCheckTeacherForced(t *testing.T, m *Model, ref *oddRecord, spec string, tol tensor.Tolerance, n int, what string) {
	t.Helper()
	be, err := ParseBackend(spec)
	require.NoError(t, err)
	defer be.Close()
	s := m.NewSession()
	for li := range m.Blocks {
		p := fmt.Sprintf("layers.%d.", li)
		var got oddRecord
		if err := guarded(func() error {
			_, err := s.Layer(li, ref.stages[p+"input"], n, be, got.recorder(p))
			return err
		}); err != nil {
			t.Errorf("%s: %s layer %d: %v", what, spec, li, err)
			return
		}
		for _, name := range ref.names {
			if !strings.HasPrefix(name, p) {
				continue
			}
			g, ok := got.stages[name]
			if !ok {
				t.Errorf("%s: %s did not record %s", what, spec, name)
				continue
			}
			if !oddCompare(t, tol, g, ref.stages[name], "%s: %s %s (teacher-forced)", what, spec, name) {
				break // the rest of the layer follows from it
			}
		}
	}
	logits := make([]float32, n*m.Config.VocabSize)
	require.NoError(t, be.MatMul.MatMulT(logits, ref.stages["final_norm"], n, m.LMHead))
	oddCompare(t, tol, logits, ref.stages["logits"], "%s: %s lm_head on naive's final_norm", what, spec)
}

// oddPieces splits n tokens as a cached sequence is fed: a prefill, two
// single tokens, then the rest in one continuation (or, below five tokens,
// one at a time).
func oddPieces(n int) []int {
	if n < 5 {
		return slices.Repeat([]int{1}, n)
	}
	p := n - n/3 - 2
	return []int{p, 1, 1, n - p - 2}
}

// oddCheckCached feeds each layer naive's input to it in pieces
// (unrecorded: pooled buffers) and compares the outputs with naive's full
// forward.
func oddCheckCached(t *testing.T, m *Model, ref *oddRecord, spec string, tol tensor.Tolerance, n int, what string) {
	t.Helper()
	be, err := ParseBackend(spec)
	require.NoError(t, err)
	defer be.Close()
	h := m.Config.HiddenSize
	s := m.NewSession()
	for li := range m.Blocks {
		p := fmt.Sprintf("layers.%d.", li)
		in := ref.stages[p+"input"]
		var out []float32
		at := 0
		for _, k := range oddPieces(n) {
			err := guarded(func() error {
				o, err := s.Layer(li, in[at*h:(at+k)*h], k, be, nil)
				out = append(out, o...)
				return err
			})
			if err != nil {
				t.Errorf("%s: %s layer %d, tokens %d..%d cached: %v", what, spec, li, at, at+k, err)
				return
			}
			at += k
		}
		oddCompare(t, tol, out, ref.stages[p+"output"], "%s: %s layer %d output fed as %v (cached)", what, spec, li, oddPieces(n))
	}
}

// oddCheckChained runs the whole unrecorded forward and a two-row runner.
// Chained, each layer adds its own float32 rounding to what it was fed, so
// the logits are held to tol once per layer: the teacher-forced checks
// hold every layer to tol alone, and docs/tolerances.md measures chained
// drift growing with depth (1.2e-5 by layer 15 of the 27B-shaped model).
// The six-GDN-layer case reaches 1.2e-5 at kernel level portable; a wrong
// kernel errs by 1e-3 or more.
func oddCheckChained(t *testing.T, m *Model, ref *oddRecord, spec string, tol tensor.Tolerance, ids []int, what string) {
	t.Helper()
	depth := float64(max(m.Config.NumLayers, 1))
	tol = tensor.Tolerance{RelL2: tol.RelL2 * depth, MaxAbsScaled: tol.MaxAbsScaled * depth}
	be, err := ParseBackend(spec)
	require.NoError(t, err)
	defer be.Close()
	n, v := len(ids), m.Config.VocabSize
	poisonPool(4 * n * max(m.Config.HiddenSize, m.Config.ConvDim(), m.Config.IntermediateSize, v, 1))
	var single []float32
	if err := guarded(func() error {
		lg, err := m.NewSession().Forward(ids, be, Options{})
		if err == nil {
			single = lg.Data
		}
		return err
	}); err != nil {
		t.Errorf("%s: %s forward: %v", what, spec, err)
		return
	}
	oddCompare(t, tol, single, ref.stages["logits"], "%s: %s logits (chained)", what, spec)
	other := oddIDs(n, v, n+101)
	var batch []float32
	if err := guarded(func() error {
		lg, err := m.Forward([][]int{other, ids}, be)
		if err == nil {
			batch = lg.Data
		}
		return err
	}); err != nil {
		t.Errorf("%s: %s two-row forward: %v", what, spec, err)
		return
	}
	assert.Equal(t, single, batch[n*v:], "%s: %s row 1 of a two-row runner differs from its own session", what, spec)
}

// oddNaive is naive's recorded forward of ids, the reference of every check.
func oddNaive(t *testing.T, m *Model, ids []int) *oddRecord {
	t.Helper()
	be, err := ParseBackend("naive")
	require.NoError(t, err)
	ref := &oddRecord{}
	_, err = m.NewSession().Forward(ids, be, Options{Record: ref.recorder("")})
	require.NoError(t, err)
	return ref
}

func TestOddShapes(t *testing.T) {
	start := time.Now()
	shapes := oddShapes()
	child := os.Getenv(oddChild) != ""
	ran := 0
	for ci, s := range shapes {
		if (child || testing.Short()) && ci%3 != 0 && s.Name != "pooled" {
			continue // the lower kernel levels, -race and qemu run every third case
		}
		ran++
		cfg, err := ParseConfig(s.json())
		require.NoError(t, err, "%s: %s", s.Name, s.json())
		m, err := NewRandom(cfg, uint64(11+ci), ci%2 == 1) // bf16 weights for every other case
		require.NoError(t, err, s.Name)
		lengths, backends := []int{s.T}, []string{oddFP32Backends[0], oddFP32Backends[1+ci%(len(oddFP32Backends)-1)]}
		if oddFull() {
			lengths, backends = oddLengths, oddFP32Backends
		}
		for _, n := range lengths {
			what := fmt.Sprintf("%s T=%d", s.Name, n)
			ids := oddIDs(n, cfg.VocabSize, n+ci)
			ref := oddNaive(t, m, ids)
			for bi, spec := range backends {
				oddCheckTeacherForced(t, m, ref, spec, oddTol(), n, what)
				oddCheckCached(t, m, ref, spec, oddTol(), n, what)
				if bi == 0 || oddFull() {
					oddCheckChained(t, m, ref, spec, oddTol(), ids, what)
				}
			}
		}
		if t.Failed() && !oddFull() {
			break // one shape's failures say enough; the full sweep lists all
		}
	}
	t.Logf("%d of %d shapes, %s, kernel level %s; closest to its bar: %s at %.2f of it", ran, len(shapes),
		time.Since(start).Round(time.Millisecond), cpu.Selected(), oddWorst.what, oddWorst.ratio)
}

// TestOddShapesKernelLevels re-runs TestOddShapes (every third case) with
// QWENREF_CPU forced to each level below the one selected.
func TestOddShapesKernelLevels(t *testing.T) {
	if os.Getenv(oddChild) != "" || os.Getenv(cpu.EnvVar) != "" {
		t.Skip("a child run, or a level already forced")
	}
	if testing.Short() {
		t.Skip("re-executes the test binary (not possible under go test -exec emulators)")
	}
	type run struct{ env, want string }
	var runs []run
	for _, l := range cpu.Supported() {
		if l != cpu.Selected() {
			runs = append(runs, run{cpu.EnvVar + "=" + l.String(), "kernel level " + l.String()})
		}
	}
	// The bf16-compute kernels below the one chosen (amx, avx512bf16,
	// widen), each where this CPU runs it.
	if k, _, err := cpu.BF16Choice(); err == nil {
		for _, b := range []cpu.BF16Kernel{cpu.BF16AMX, cpu.BF16AVX512, cpu.BF16Widen} {
			if b < k {
				runs = append(runs, run{cpu.BF16EnvVar + "=" + b.String(), "bf16 kernel "})
			}
		}
	}
	for _, r := range runs {
		cmd := exec.Command(os.Args[0], "-test.run=^(TestOddShapes|TestOddShapesBF16)$", "-test.v")
		cmd.Env = append(os.Environ(), r.env, oddChild+"=1")
		out, err := cmd.CombinedOutput()
		if errors.Is(err, syscall.ENOEXEC) {
			t.Skipf("cannot run the test binary as a child here: %v", err)
		}
		require.NoError(t, err, "%s:\n%s", r.env, out)
		require.Contains(t, string(out), r.want, "%s was not applied", r.env)
		require.Contains(t, string(out), "--- PASS: TestOddShapesBF16", r.env)
		t.Logf("%s: %s", r.env, oddLastLine(string(out), r.want))
	}
}

// oddBF16Tol bounds chunked-bf16 against naive:matmul=bf16, which runs the
// same bf16 products: what differs is the float32 kernels' rounding
// (~1e-7), which can only flip the bf16 rounding of the odd activation
// after it (an error of at most 2⁻⁸ relative in that one element), so a
// stage stays well below 2⁻⁸ in relative L2 (measured: 1.2e-3 at worst,
// most stages 1e-7), while a wrong conv, core or expert kernel errs by
// 1e-2 or more. Scaled max-abs 10× that, as the trace's bf16 bars.
var oddBF16Tol = tensor.Tolerance{RelL2: 1.0 / 256, MaxAbsScaled: 10.0 / 256}

// oddHeadBF16Tol bounds the bf16 LM head against the float32 one on the same
// input: one product whose activations and weights are rounded to bf16
// (2⁻⁹ relative per term, in quadrature), at the trace's bf16 bar for one
// product, 4·2⁻⁸.
var oddHeadBF16Tol = tensor.Tolerance{RelL2: 4.0 / 256, MaxAbsScaled: 40.0 / 256}

// TestOddShapesBF16 holds chunked-bf16 to naive:matmul=bf16 on the dense
// cases and the sparse ones that route to every expert (top-k = E: bf16
// rounding may otherwise swap a near-tied expert, a legitimate O(1)
// difference): every stage teacher-forced and cached, the chained logits,
// and the bf16 LM head to the float32 one. Under QWENREF_BF16=widen the
// bf16 backend computes in float32 and is held to the golden bars against
// naive itself.
func TestOddShapesBF16(t *testing.T) {
	be, err := ParseBackend("chunked-bf16")
	require.NoError(t, err)
	widen := be.Precision == PrecisionF32
	be.Close()
	ref, tol := "naive:matmul=bf16", oddBF16Tol
	if widen {
		ref, tol = "naive", tensor.GoldenTolerance
	}
	child := os.Getenv(oddChild) != ""
	n := 0
	for ci, s := range oddShapes() {
		if s.E > 0 && s.TopK != s.E || (child || testing.Short()) && ci%3 != 0 {
			continue
		}
		n++
		cfg, err := ParseConfig(s.json())
		require.NoError(t, err, s.Name)
		m, err := NewRandom(cfg, uint64(11+ci), ci%2 == 1)
		require.NoError(t, err, s.Name)
		ids := oddIDs(s.T, cfg.VocabSize, s.T+ci)
		what := fmt.Sprintf("%s T=%d", s.Name, s.T)
		rb, err := ParseBackend(ref)
		require.NoError(t, err)
		rec := &oddRecord{}
		_, err = m.NewSession().Forward(ids, rb, Options{Record: rec.recorder("")})
		require.NoError(t, err, what)
		oddCheckTeacherForced(t, m, rec, "chunked-bf16", tol, s.T, what)
		oddCheckCached(t, m, rec, "chunked-bf16", tol, s.T, what)
		oddCheckChained(t, m, rec, "chunked-bf16", tol, ids, what)
		if !widen {
			f32 := oddNaive(t, m, ids)
			logits := make([]float32, s.T*cfg.VocabSize)
			bb, err := ParseBackend("chunked-bf16")
			require.NoError(t, err)
			require.NoError(t, bb.MatMul.MatMulT(logits, f32.stages["final_norm"], s.T, m.LMHead))
			oddCompare(t, oddHeadBF16Tol, logits, f32.stages["logits"], "%s: chunked-bf16 lm_head vs float32 naive's", what)
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d shapes, bf16 kernel %s", n, CPUKernels().BF16)
}

func oddLastLine(out, with string) string {
	i := strings.LastIndex(out, with)
	if i < 0 {
		return ""
	}
	j := strings.LastIndex(out[:i], "\n")
	line, _, _ := strings.Cut(out[j+1:], "\n")
	return strings.TrimSpace(line)
}

// TestOddShapesRefusedByName: the shapes the model cannot take are refused
// when the config is parsed, by an error naming the key, never a panic in
// a kernel.
func TestOddShapesRefusedByName(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(*oddShape)
		want string
	}{
		{"odd rotary dim", func(s *oddShape) { s.DH, s.Rot = 20, 0.25 }, "partial_rotary_factor"},
		{"no rotary dim", func(s *oddShape) { s.DH, s.Rot = 2, 0.25 }, "partial_rotary_factor"},
		{"value heads not a multiple", func(s *oddShape) { s.NK, s.NV = 2, 3 }, "linear_num_value_heads (3) must be a multiple of linear_num_key_heads (2)"},
		{"kv heads not a divisor", func(s *oddShape) { s.NH, s.NKV = 3, 2 }, "num_attention_heads (3) must be a multiple of num_key_value_heads (2)"},
		{"conv kernel 0", func(s *oddShape) { s.K = 0 }, "linear_conv_kernel_dim must be positive"},
		{"head dim 0", func(s *oddShape) { s.DH = 0; s.NH = 64 }, "head_dim"},
		{"top-k over E", func(s *oddShape) { s.Family, s.I, s.E, s.TopK, s.MoEI, s.SharedI = "moe", 0, 3, 4, 8, 8 }, "num_experts_per_tok"},
		{"no shared expert", func(s *oddShape) { s.Family, s.I, s.E, s.TopK, s.MoEI, s.SharedI = "moe", 0, 3, 1, 8, 0 }, "shared_expert_intermediate_size"},
		{"mlp_only_layers outside", func(s *oddShape) { s.Family, s.E, s.TopK, s.MoEI, s.SharedI, s.MLPOnly = "next", 3, 1, 8, 8, []int{2} }, "mlp_only_layers"},
	} {
		s := oddBase
		c.f(&s)
		var err error
		require.NotPanics(t, func() { _, err = ParseConfig(s.json()) }, c.name)
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
}
