package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
// every stage (the golden tests' 1e-5 bar); a trace with one stage
// perturbed is reported at exactly that stage, and exits 1.
func TestTraceCompare(t *testing.T) {
	inputs := filepath.Join(traceGolden, "inputs.json")
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids-json", inputs,
		"--compare", filepath.Join(traceGolden, "expected.safetensors"))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "rel L2")
	assert.Contains(t, stdout, "all compared stages agree")

	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	code, _, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--out", good)
	require.Equal(t, 0, code, stderr)
	st, err := weights.Open(good)
	require.NoError(t, err)
	var ts []weights.NamedTensor
	for _, n := range st.Names() {
		data, shape, err := st.Float32(n)
		require.NoError(t, err)
		if n == "layers.1.conv_out" {
			data[7] += 0.5 // one wrong element, as a buggy kernel might produce
		}
		ts = append(ts, weights.NamedTensor{Name: n, DType: "F32", Shape: shape, Data: data})
	}
	require.NoError(t, st.Close())
	bad := filepath.Join(dir, "bad.safetensors")
	require.NoError(t, weights.WriteFile(bad, ts, nil))

	code, stdout, stderr = runCLI("trace", "--model", traceGolden, "--ids", "1,2,3", "--layer", "3", "--compare", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "stage layers.1.conv_out is the first to differ")
	assert.Regexp(t, `layers\.1\.conv_out .*DIFFERS   ← first divergence`, stdout, "the divergent stage is printed even outside --layer")
	assert.NotContains(t, stdout, "layers.1.a_proj", "stages of other layers that agree stay quiet")
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
	code, _, stderr := runCLI("trace", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "first stage where a kernel goes wrong")
	assert.Contains(t, stderr, "Examples:")
	assert.Contains(t, stderr, "--compare naive.safetensors")
}

// With no --model, trace runs the bundled demo.
func TestTraceBundledDefault(t *testing.T) {
	code, stdout, stderr := runCLI("trace", "--ids", "9707,11,1879", "--layer", "3")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "RANDOM weights")
	assert.Contains(t, stdout, "layers.3.attn_core")
}
