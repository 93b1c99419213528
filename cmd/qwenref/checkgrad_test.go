package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check --grad runs qwenref's float32 backward on every gradient op, and a
// plug-in's backward entry points with one --plugin: testdata/plugin/grad.c
// has a correct conv backward (passed, bias and packed sequences included)
// and a gated RMSNorm backward without the norm's mean term (failed at
// dx); an op it does not export, and a plug-in without backward entries,
// are refused by name.
func TestCheckGradPlugin(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: the example plug-in cannot be built (apt-get install gcc)")
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "grad.so")
	b, err := exec.Command(gcc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-I", filepath.Join("..", "..", "plugin"),
		"-o", so, filepath.Join("..", "..", "testdata", "plugin", "grad.c"), "-lm").CombinedOutput()
	require.NoError(t, err, "%s", b)
	good, _ := buildPlugins(t)
	files := map[string][]string{
		"conv":      {"--op", "conv", "--grad", "--bias", "--dtype", "bf16", "--seqlens", "2,1,13"},
		"conv-f32":  {"--op", "conv", "--grad", "--seq", "20", "--channels", "24"},
		"norm":      {"--op", "gated-rmsnorm", "--grad", "--seq", "6"},
		"attention": {"--op", "attention", "--grad", "--seq", "5", "--past", "3"},
		"gdn":       {"--op", "gdn-core", "--grad", "--l2norm", "--seqlens", "3,20"},
	}
	for name, args := range files {
		file := filepath.Join(dir, name+".safetensors")
		code, _, stderr := runCLI(append([]string{"golden", "--out", file}, args...)...)
		require.Equal(t, 0, code, "%s: %s", name, stderr)
		code, stdout, stderr := runCLI("check", file, "--grad")
		assert.Equal(t, 0, code, "%s, built-in backward: %s%s", name, stdout, stderr)
		assert.Contains(t, stdout, "qwenref's float32 backward")
	}
	at := func(name string) string { return filepath.Join(dir, name+".safetensors") }
	for _, f := range []string{"conv", "conv-f32"} {
		code, stdout, stderr := runCLI("check", at(f), "--grad", "--plugin", "grad="+so)
		assert.Equal(t, 0, code, "%s%s", stdout, stderr)
		assert.Contains(t, stdout, "plug-in grad's backward")
		assert.Contains(t, stdout, "every output agrees")
	}
	code, stdout, stderr := runCLI("check", at("conv"), "--grad", "--plugin", "grad="+so)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "dbias")
	code, stdout, stderr = runCLI("check", at("norm"), "--grad", "--plugin", "grad="+so)
	assert.Equal(t, 4, code, "%s%s", stdout, stderr)
	assert.Contains(t, stdout, "dx differs from the float64 reference")
	code, _, stderr = runCLI("check", at("attention"), "--grad", "--plugin", "grad="+so)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "plugin grad exports no qwenref_attention_backward")
	code, _, stderr = runCLI("check", at("conv"), "--grad", "--plugin", "fwd="+good)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "plugin fwd")
	assert.Contains(t, stderr, "exports no backward entry point")
	code, _, stderr = runCLI("check", at("conv"), "--grad", "--plugin", "grad="+so, "--plugin", "fwd="+good)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "give one --plugin")
}
