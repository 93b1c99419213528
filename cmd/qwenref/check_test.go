package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildPlugins compiles testdata/plugin's correct and wrong plug-ins with
// gcc into a temporary directory.
func buildPlugins(t *testing.T) (good, wrong string) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: the example plug-ins cannot be built (apt-get install gcc)")
	}
	dir := t.TempDir()
	for _, name := range []string{"good", "wrong"} {
		out := filepath.Join(dir, name+".so")
		cmd := exec.Command(gcc, "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-I", filepath.Join("..", "..", "plugin"),
			"-o", out, filepath.Join("..", "..", "testdata", "plugin", name+".c"), "-lm")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
	}
	return filepath.Join(dir, "good.so"), filepath.Join(dir, "wrong.so")
}

// check passes qwenref's own kernels and the correct plug-in on every op
// and dtype, and catches the wrong plug-in's gated delta rule.
func TestCheckBackendsAndPlugins(t *testing.T) {
	good, wrong := buildPlugins(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		part string
	}{
		{"gdn-f32", []string{"--op", "gdn-core", "--seq", "70"}, "delta"},
		{"gdn-bf16-packed", []string{"--op", "gdn-core", "--dtype", "bf16", "--seqlens", "37,30,1"}, "delta"},
		{"conv-f16", []string{"--op", "conv", "--dtype", "f16", "--seq", "20"}, "conv"},
		{"attention", []string{"--op", "attention", "--seq", "9", "--past", "4"}, "attn"},
	} {
		file := filepath.Join(dir, c.name+".safetensors")
		code, _, stderr := runCLI(append([]string{"golden", "--out", file}, c.args...)...)
		require.Equal(t, 0, code, stderr)
		for _, be := range []string{"naive", "chunked"} {
			code, stdout, stderr := runCLI("check", file, "--backend", be)
			assert.Equal(t, 0, code, "%s on %s: %s%s", c.name, be, stdout, stderr)
			code, stdout, stderr = runCLI("check", "--backend", be, file) // the file last
			assert.Equal(t, 0, code, "%s on %s, file last: %s%s", c.name, be, stdout, stderr)
		}
		code, stdout, stderr := runCLI("check", file, "--plugin", "good="+good, "--backend", "chunked:"+c.part+"=good")
		assert.Equal(t, 0, code, "%s, good plug-in: %s%s", c.name, stdout, stderr)
		assert.Contains(t, stdout, "every output agrees")
		code, stdout, stderr = runCLI("check", file, "--plugin", "wrong="+wrong, "--backend", "chunked:delta=wrong")
		if c.part == "delta" {
			assert.Equal(t, 4, code, "%s, wrong plug-in: %s%s", c.name, stdout, stderr)
			assert.Contains(t, stdout, "out differs from the float64 reference")
		} else {
			assert.Equal(t, 0, code, "%s does not use the delta kernel: %s", c.name, stderr)
		}
	}
	code, _, stderr := runCLI("check")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "give the golden file")
	code, _, stderr = runCLI("check", filepath.Join(dir, "none.safetensors"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "none.safetensors")
	code, _, stderr = runCLI("check", filepath.Join(dir, "gdn-f32.safetensors"), "--plugin", "x="+filepath.Join(dir, "gdn-f32.safetensors"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot load")
	// A plug-in named without a slash is the file in the working directory
	// (dlopen alone would look for it on the system's library path).
	conv := filepath.Join(dir, "conv-f16.safetensors")
	ckpt, err := filepath.Abs(traceGolden)
	require.NoError(t, err)
	t.Chdir(filepath.Dir(good))
	code, stdout, stderr := runCLI("check", conv, "--plugin", "goodrel=good.so", "--backend", "chunked:conv=goodrel")
	assert.Equal(t, 0, code, "%s%s", stdout, stderr)
	// A plug-in is an input: --out may not replace it.
	for _, cmd := range [][]string{{"forward", "--model", ckpt}, {"trace", "--model", ckpt}} {
		code, _, stderr = runCLI(append(cmd, "--ids", "1", "--plugin", "good="+good, "--out", good)...)
		assert.Equal(t, 1, code, "%v: %s", cmd, stderr)
		assert.Contains(t, stderr, "refusing to overwrite an input")
	}
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(b, []byte("\x7fELF")), "the plug-in was replaced")
}

// The plug-in runs inside the model: trace against a naive trace passes
// with the correct one and names the wrong one's stage, core_out of the
// first Gated DeltaNet layer (layer 1 of this checkpoint).
func TestTracePluginInPlace(t *testing.T) {
	good, wrong := buildPlugins(t)
	ref := filepath.Join(t.TempDir(), "naive.safetensors")
	ids := "5,17,42,7,9,10,3,1,2,80"
	code, _, stderr := runCLI("trace", "--model", traceGolden, "--ids", ids, "--out", ref)
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr := runCLI("trace", "--model", traceGolden, "--ids", ids, "--plugin", "tgood="+good,
		"--backend", "chunked:delta=tgood:conv=tgood:attn=tgood:matmul=tgood", "--compare", ref)
	assert.Equal(t, 0, code, "%s%s", stdout, stderr)
	code, stdout, stderr = runCLI("trace", "--model", traceGolden, "--ids", ids, "--plugin", "twrong="+wrong,
		"--backend", "chunked:delta=twrong", "--compare", ref)
	assert.Equal(t, 4, code, stderr)
	assert.Contains(t, stdout, "the first is layers.1.core_out (isolated)")
}

// bench runs the plug-in's kernel as the delta core and inside the GDN
// layer, beside qwenref's own.
func TestBenchPlugin(t *testing.T) {
	good, _ := buildPlugins(t)
	code, stdout, stderr := runCLI("bench", "--plugin", "bgood="+good, "--backends", "chunked,chunked:delta=bgood",
		"--op", "gdn-core,gdn-layer", "--shape", "tiny", "--seq", "8,16", "--reps", "1", "--warmup", "0", "--min-time", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "chunked:delta=bgood")
}
