package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/verify"
	"github.com/qwenref/qwenref/weights"
)

// traceGolden is a golden checkpoint whose layer 1 is a Gated DeltaNet
// layer and layer 0 an attention layer.
var traceGolden = filepath.Join(goldenRoot, "causal-f16-t130")

// The GDN stages of one layer, in the order the layer computes them.
var gdnStages = []string{"input", "mixer_in", "qkv_proj", "z_proj", "b_proj", "a_proj", "conv_out", "g", "beta",
	"q_l2", "k_l2", "v", "core_out", "final_state", "gated_norm_out", "mixer_out", "mlp_in", "mlp_out", "output"}

func TestTracePrintsOneLayerInOrder(t *testing.T) {
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids", "5,17,42", "--layer", "1", "--values", "2")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "layer 1 is linear_attention")
	last := -1
	for _, s := range gdnStages {
		i := strings.Index(stdout, "layers.1."+s+" ")
		require.GreaterOrEqual(t, i, 0, "stage %s missing", s)
		assert.Greater(t, i, last, "stage %s out of execution order", s)
		last = i
	}
	assert.Contains(t, stdout, "layers.1.conv_out          [3 96]")
	assert.Contains(t, stdout, "‖x‖₂=")
	assert.NotContains(t, stdout, "layers.0.", "only the chosen layer")
	assert.NotContains(t, stdout, "logits")

	code, stdout, stderr = runCLI("trace", "--model", traceGolden, "--ids", "5,17,42", "--all")
	require.Equal(t, 0, code, stderr)
	for _, s := range []string{"embeddings", "layers.0.attn_core", "layers.0.q_rope", "layers.3.output", "final_norm", "logits"} {
		assert.Contains(t, stdout, s+" ")
	}
}

// --out holds every stage of every layer with the printed shapes, and the
// stages chain: each layer's input is the previous layer's output.
func TestTraceOutWritesAllStages(t *testing.T) {
	out := filepath.Join(t.TempDir(), "trace.safetensors")
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids", "5,17,42,7", "--out", out)
	require.Equal(t, 0, code, stderr)
	st, err := weights.Open(out)
	require.NoError(t, err)
	defer st.Close()
	names := st.Names()
	assert.Contains(t, stdout, "wrote 67 stages")
	assert.Len(t, names, 67, "embeddings + 4 layers + final_norm + logits")
	for _, s := range gdnStages {
		assert.Contains(t, names, "layers.1."+s)
	}
	_, shape, err := st.Float32("logits")
	require.NoError(t, err)
	assert.Equal(t, []int{4, 96}, shape)
	prev, _, err := st.Float32("layers.0.output")
	require.NoError(t, err)
	next, _, err := st.Float32("layers.1.input")
	require.NoError(t, err)
	assert.Equal(t, prev, next)
}

// Against transformers' own intermediates the naive backend agrees at
// every stage, teacher-forced; a trace with one stage perturbed is
// reported at exactly that stage, exits 4 and says so in the JSON report.
func TestTraceCompare(t *testing.T) {
	inputs := filepath.Join(traceGolden, "inputs.json")
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids-json", inputs,
		"--compare", filepath.Join(traceGolden, "expected.safetensors"))
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `layers\.0\.attn_core +isolated rel L2 \S+ ≤ \S+  max-abs \S+ ≤ \S+  ok`, stdout)
	assert.Regexp(t, `all \d+ checks agree`, stdout)

	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--out", good)
	require.Equal(t, 0, code, stderr)
	bad := filepath.Join(dir, "bad.safetensors")
	rewriteTrace(t, good, bad, func(name string, data []float32) {
		if name == "layers.1.conv_out" {
			data[7] += 0.5 // one wrong element, as a buggy kernel might produce
		}
	})
	code, stdout, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--layer", "3", "--compare", bad)
	assert.Equal(t, 4, code, stderr)
	assert.Regexp(t, `layers\.1\.conv_out +isolated .*DIFFERS   ← first failure`, stdout, "the failing stage is printed even outside --layer")
	assert.Contains(t, stdout, "the first is layers.1.conv_out (isolated)")
	assert.NotContains(t, stdout, "layers.1.a_proj", "stages of other layers that agree stay quiet")

	code, stdout, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--compare", bad, "--json")
	assert.Equal(t, 4, code, stderr)
	var rep verify.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, verify.TraceSchema, rep.Schema)
	assert.Equal(t, "differ", rep.Verdict)
	require.NotNil(t, rep.First)
	assert.Equal(t, "layers.1.conv_out", rep.First.Stage)
	assert.Equal(t, "isolated", rep.First.Mode)
	assert.Equal(t, rep.Compared, len(rep.Checks))

	// The end-to-end mode remains, with its single bar.
	code, stdout, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--compare", bad, "--chained")
	assert.Equal(t, 4, code, stderr)
	assert.Contains(t, stdout, "stage layers.1.conv_out is the first to differ")
}

// rewriteTrace copies a trace file, letting edit change any tensor.
func rewriteTrace(t *testing.T, from, to string, edit func(name string, data []float32)) {
	st, err := weights.Open(from)
	require.NoError(t, err)
	defer st.Close()
	var ts []weights.NamedTensor
	for _, n := range st.Names() {
		data, shape, err := st.Float32(n)
		require.NoError(t, err)
		edit(n, data)
		ts = append(ts, weights.NamedTensor{Name: n, DType: "F32", Shape: shape, Data: data})
	}
	require.NoError(t, weights.WriteFile(to, ts, nil))
}

// A reference with no stage of this model is not a pass: exit 1. So is
// a trace written for other ids.
func TestTraceCompareNothingComparable(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.safetensors")
	require.NoError(t, weights.WriteFile(other, []weights.NamedTensor{{Name: "unrelated", DType: "F32", Shape: []int{2}, Data: []float32{1, 2}}}, nil))
	code, _, stderr := runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--compare", other)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "nothing was compared")
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--compare", other, "--json")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "nothing was compared")

	ref := filepath.Join(dir, "ref.safetensors")
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--out", ref)
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,4", "--compare", ref)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "traced on ids 1,2,3, not 1,2,4")
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,4", "--compare", ref, "--chained")
	assert.Equal(t, 1, code, "chained: other ids are an error, not a difference at the embeddings")
	assert.Contains(t, stderr, "traced on ids 1,2,3, not 1,2,4")
	// ids with a terminal escape in them are shown escaped.
	esc := filepath.Join(dir, "esc.safetensors")
	require.NoError(t, weights.WriteFile(esc, []weights.NamedTensor{{Name: "unrelated", DType: "F32", Shape: []int{1}, Data: []float32{1}}},
		map[string]string{"ids": "1,2,\x1b[2J"}))
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--compare", esc)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `traced on ids 1,2,\x1b[2J, not 1,2,3`)
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--json")
	assert.Equal(t, 2, code, "--json without --compare is a usage error")
	assert.Contains(t, stderr, "need --compare")
}

// Chunked against naive, teacher-forced, agrees on every golden
// checkpoint, and against transformers' own stages too.
func TestTraceChunkedAgreesOnEveryGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(goldenRoot, "manifest.json"))
	require.NoError(t, err)
	var man struct {
		Cases []struct{ Name string } `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &man))
	require.NotEmpty(t, man.Cases)
	for _, c := range man.Cases {
		dir := filepath.Join(goldenRoot, c.Name)
		inputs := filepath.Join(dir, "inputs.json")
		naive := filepath.Join(t.TempDir(), "naive.safetensors")
		code, _, stderr := runCLI("trace", "--model", dir, "--ids-json", inputs, "--out", naive)
		require.Equal(t, 0, code, "%s: %s", c.Name, stderr)
		for _, ref := range []string{naive, filepath.Join(dir, "expected.safetensors")} {
			code, stdout, stderr := runCLI("trace", "--model", dir, "--ids-json", inputs, "--backend", "chunked", "--compare", ref)
			assert.Equal(t, 0, code, "%s vs %s: %s%s", c.Name, ref, stdout, stderr)
		}
	}
}

func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.safetensors")
	two := filepath.Join(dir, "two.json")
	data, _ := json.Marshal(map[string]any{"ids": [][]int{{1, 2}, {3, 4}}})
	require.NoError(t, os.WriteFile(two, data, 0o644))
	for _, c := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"no ids", []string{"--model", traceGolden}, 2, "exactly one of --ids or --ids-json"},
		{"both ids", []string{"--model", traceGolden, "--ids", "1", "--ids-json", two}, 2, "exactly one of"},
		{"bad layer", []string{"--model", traceGolden, "--ids", "1", "--layer", "4"}, 2, "--layer 4 is outside the model's layers 0..3"},
		{"bad values", []string{"--model", traceGolden, "--ids", "1", "--values", "-1"}, 2, "--values must be"},
		{"bad id", []string{"--model", traceGolden, "--ids", "1,x"}, 1, "--ids"},
		{"id out of range", []string{"--model", traceGolden, "--ids", "1,96", "--out", out}, 1, "outside the vocabulary"},
		{"bad backend", []string{"--model", traceGolden, "--ids", "1", "--backend", "tpu", "--out", out}, 1, `unknown backend "tpu"`},
		{"bad compare", []string{"--model", traceGolden, "--ids", "1", "--compare", two, "--out", out}, 1, "--compare"},
		{"tol without chained", []string{"--model", traceGolden, "--ids", "1", "--compare", two, "--tol", "1e-3"}, 2, "--tol is the bar of --chained"},
		{"chained json", []string{"--model", traceGolden, "--ids", "1", "--compare", two, "--chained", "--json"}, 2, "leave out --chained"},
		{"bad precision", []string{"--model", traceGolden, "--ids", "1", "--compare", two, "--precision", "f8"}, 2, "--precision must be"},
		{"bad plugin", []string{"--model", traceGolden, "--ids", "1", "--plugin", "nopath"}, 2, "want NAME=PATH.so"},
		{"missing plugin", []string{"--model", traceGolden, "--ids", "1", "--plugin", "x=" + filepath.Join(dir, "none.so")}, 1, "plugin x"},
		{"bad out dir", []string{"--model", traceGolden, "--ids", "1", "--out", filepath.Join(out, "x", "y")}, 1, ""},
	} {
		code, _, stderr := runCLI(append([]string{"trace"}, c.args...)...)
		assert.Equal(t, c.code, code, "%s: %s", c.name, stderr)
		assert.Contains(t, stderr, c.contains, c.name)
		_, err := os.Stat(out)
		assert.True(t, os.IsNotExist(err), "%s: no file may be left behind", c.name)
	}
	// Several rows: row 0 is traced, and the user is told.
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids-json", two)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "holds 2 sequences; tracing row 0")
	assert.Contains(t, stdout, "2 tokens [1 2]")
}

func TestTraceHelpTeaches(t *testing.T) {
	code, stdout, _ := runCLI("trace", "-h") // help asked for goes to stdout
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "first stage where a kernel goes wrong")
	assert.Contains(t, stdout, "Examples:")
	assert.Contains(t, stdout, "--compare naive.safetensors")
}

// With no --model, trace runs the bundled demo.
func TestTraceBundledDefault(t *testing.T) {
	code, stdout, stderr := runCLI("trace", "--ids", "9707,11,1879", "--layer", "3")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "RANDOM weights")
	assert.Contains(t, stdout, "layers.3.attn_core")
}

// synthDeep writes a 64-layer checkpoint of the tiny shape's width (48
// Gated DeltaNet and 16 attention layers) into dir.
func synthDeep(t *testing.T, dir string) {
	js, err := model.ShapeConfigJSON("tiny")
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(js, &raw))
	raw["text_config"].(map[string]any)["num_hidden_layers"] = 64
	js, err = json.Marshal(raw)
	require.NoError(t, err)
	cfg, err := model.ParseConfig(js)
	require.NoError(t, err)
	require.NoError(t, model.WriteSynthetic(dir, cfg, js, model.SynthOptions{Seed: 5, ShardBytes: 1 << 40}))
}

// perturbCopy copies the checkpoint in src to dst with one tensor scaled
// by 1.01 (a 1% error, one bf16 step or two).
func perturbCopy(t *testing.T, src, dst, tensorName string) {
	require.NoError(t, os.MkdirAll(dst, 0o755))
	for _, f := range []string{"config.json", "model.safetensors.index.json"} {
		if b, err := os.ReadFile(filepath.Join(src, f)); err == nil {
			require.NoError(t, os.WriteFile(filepath.Join(dst, f), b, 0o644))
		}
	}
	shard := weights.ShardName(1, 1)
	st, err := weights.Open(filepath.Join(src, shard))
	require.NoError(t, err)
	defer st.Close()
	var ts []weights.NamedTensor
	found := false
	for _, n := range st.Names() {
		data, shape, err := st.Float32(n)
		require.NoError(t, err)
		info, _ := st.Info(n)
		if info.Stored == tensorName {
			for i := range data {
				data[i] *= 1.01
			}
			found = true
		}
		ts = append(ts, weights.NamedTensor{Name: info.Stored, DType: "BF16", Shape: shape, Data: data})
	}
	require.True(t, found, tensorName)
	require.NoError(t, weights.WriteFile(filepath.Join(dst, shard), ts, nil))
}

// On 64 layers, chunked against naive, teacher-forced, agrees (the bars
// do not grow with depth); a checkpoint with one layer's weight off by 1%
// fails at that layer's first stage the weight touches, and no earlier.
func TestTraceDeepSyntheticLocalises(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and traces a 64-layer checkpoint")
	}
	root := t.TempDir()
	base := filepath.Join(root, "base")
	synthDeep(t, base)
	ids := "5,17,42,7,99,1000,3,8,150000,12,64,2,77,31,5,9,1,0,44,100"
	ref := filepath.Join(root, "naive.safetensors")
	code, _, stderr := runCLI("trace", "--model", base, "--ids", ids, "--out", ref)
	require.Equal(t, 0, code, stderr)
	chained := filepath.Join(root, "chunked.safetensors")
	code, stdout, stderr := runCLI("trace", "--model", base, "--ids", ids, "--backend", "chunked", "--compare", ref, "--json", "--out", chained)
	require.Equal(t, 0, code, stderr)
	var rep verify.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	assert.Equal(t, 64, rep.Layers)
	assert.Greater(t, rep.Compared, 64*19, "every stage of every layer")
	worst := verify.Worst(rep.Checks)
	t.Logf("64 layers, chunked vs naive: %d checks, worst %s %s rel L2 %.2e (bar %.1e)", rep.Compared, worst.Stage, worst.Mode, worst.RelL2, worst.TolRelL2)
	// The drift a chained run accumulates over depth (docs/tolerances.md),
	// against the forced worst above.
	a, err := weights.Open(ref)
	require.NoError(t, err)
	defer a.Close()
	b, err := weights.Open(chained)
	require.NoError(t, err)
	defer b.Close()
	var drift []string
	for _, li := range []int{0, 7, 15, 31, 47, 63} {
		for _, stage := range []string{"output", "core_out"} {
			name := fmt.Sprintf("layers.%d.%s", li, stage)
			x, _, err := a.Float32(name)
			if err != nil {
				continue // core_out: attention layers have none
			}
			y, _, err := b.Float32(name)
			require.NoError(t, err)
			drift = append(drift, fmt.Sprintf("%s %.2e", name, tensor.RelL2(y, x)))
		}
	}
	t.Logf("chained drift, chunked vs naive: %s", strings.Join(drift, ", "))

	// A bf16 backend passes its own bars on all 64 layers too.
	code, stdout, stderr = runCLI("trace", "--model", base, "--ids", ids, "--backend", "chunked:matmul=testbf16round", "--compare", ref, "--json")
	require.Equal(t, 0, code, stderr)
	var brep verify.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &brep))
	bw := verify.Worst(brep.Checks)
	t.Logf("64 layers, bf16-rounded matmul vs naive: worst %s %s rel L2 %.2e (bar %.1e)", bw.Stage, bw.Mode, bw.RelL2, bw.TolRelL2)

	for _, c := range []struct{ tensor, first string }{
		{"model.language_model.layers.41.linear_attn.out_proj.weight", "layers.41.mixer_out"},
		{"model.language_model.layers.55.self_attn.k_proj.weight", "layers.55.k_proj"},
		{"model.language_model.layers.62.mlp.up_proj.weight", "layers.62.mlp_out"},
	} {
		bad := filepath.Join(root, strings.ReplaceAll(c.first, ".", "-"))
		perturbCopy(t, base, bad, c.tensor)
		code, stdout, stderr := runCLI("trace", "--model", bad, "--ids", ids, "--backend", "chunked", "--compare", ref, "--json")
		require.Equal(t, 4, code, "%s: %s", c.tensor, stderr)
		var rep verify.Report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.NotNil(t, rep.First)
		assert.Equal(t, c.first, rep.First.Stage, "%s perturbed", c.tensor)
		t.Logf("%s ×1.01: first failure %s (%s) rel L2 %.2e > %.1e", c.tensor, rep.First.Stage, rep.First.Mode, rep.First.RelL2, rep.First.TolRelL2)
	}
}

// bf16Round is a matmul that rounds activations and weights to bf16
// first and accumulates in float32, as a bf16 backend does: the test
// stand-in for matmul=bf16 on CPUs without AVX512_BF16.
type bf16Round struct{}

func (bf16Round) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	xr := slices.Clone(x)
	for i, v := range xr {
		xr[i] = tensor.BF16ToFloat32(tensor.Float32ToBF16(v))
	}
	wb := make([]uint16, w.Rows*w.Cols)
	for i, v := range w.ToFloat32() {
		wb[i] = tensor.Float32ToBF16(v)
	}
	wm, err := tensor.NewMatrixBF16(w.Rows, w.Cols, wb)
	if err != nil {
		return err
	}
	return linalg.Blocked{}.MatMulT(y, xr, m, wm)
}

// Precision says what the kernel is: it rounds to bf16.
func (bf16Round) Precision() model.Precision { return model.PrecisionBF16 }

func init() {
	if err := model.RegisterKernel("matmul", "testbf16round", "test only: bf16-rounded activations and weights", func() (any, error) { return bf16Round{}, nil }); err != nil {
		panic(err)
	}
}

// A bf16 backend (its spec says bf16) is held to the bf16 error model and
// passes it; held to the float32 one it fails, so the two bars differ
// where they must.
func TestTraceBF16ErrorModel(t *testing.T) {
	ref := filepath.Join(t.TempDir(), "naive.safetensors")
	ids := "5,17,42,7,9,10,3,1,2,80,11,12"
	code, _, stderr := runCLI("trace", "--model", traceGolden, "--ids", ids, "--out", ref)
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids", ids, "--backend", "chunked:matmul=testbf16round", "--compare", ref, "--json")
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	var rep verify.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	assert.Equal(t, "bf16", rep.Precision)
	w := verify.Worst(rep.Checks)
	t.Logf("bf16-rounded matmul vs naive: worst %s %s rel L2 %.2e (bar %.1e)", w.Stage, w.Mode, w.RelL2, w.TolRelL2)
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", ids, "--backend", "chunked:matmul=testbf16round", "--compare", ref, "--precision", "f32")
	assert.Equal(t, 4, code, stderr)
}

// TestTracePrecisionFromTheBackend: --precision auto takes the backend's
// own precision, which agrees with what its spec says (a bf16 part, or a
// cuda backend other than cuda-fp32) for every backend this machine can
// build.
func TestTracePrecisionFromTheBackend(t *testing.T) {
	specBF16 := func(spec string) bool {
		return strings.Contains(spec, "bf16") || strings.Contains(strings.ReplaceAll(spec, "cuda-fp32", ""), "cuda")
	}
	specs := append(model.BackendNames(), "chunked:matmul=bf16", "naive:matmul=bf16", "chunked:delta=naive")
	built := 0
	for _, spec := range specs {
		be, err := model.ParseBackend(spec)
		if err != nil {
			continue // a GPU backend without a GPU
		}
		built++
		if got := be.Precision == model.PrecisionBF16; got != specBF16(spec) {
			t.Errorf("%s: precision %s, but its spec says bf16=%v", spec, be.Precision, specBF16(spec))
		}
		be.Close()
	}
	if built < 4 {
		t.Fatalf("only %d backends could be built", built)
	}
}
