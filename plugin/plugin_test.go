package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/model"
)

// cc builds a shared library from C source into dir.
func cc(t *testing.T, dir, name, src string) string {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: cannot build test libraries (apt-get install gcc)")
	}
	c := filepath.Join(dir, name+".c")
	require.NoError(t, os.WriteFile(c, []byte(src), 0o644))
	so := filepath.Join(dir, name+".so")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-I", ".", "-o", so, c).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return so
}

func TestParseFlag(t *testing.T) {
	n, p, err := ParseFlag("mine=./lib/x=y.so")
	require.NoError(t, err)
	assert.Equal(t, "mine", n)
	assert.Equal(t, "./lib/x=y.so", p, "only the first = splits")
	for _, bad := range []string{"", "mine", "=x.so", "mine="} {
		_, _, err := ParseFlag(bad)
		assert.Error(t, err, bad)
	}
}

// Every refusal names the plug-in and says why; none registers anything.
func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	wrongABI := cc(t, dir, "abi99", "int qwenref_plugin_abi(void) { return 99; }\nint qwenref_conv(void) { return 0; }\n")
	noABI := cc(t, dir, "noabi", "int qwenref_conv(void) { return 0; }\n")
	noKernel := cc(t, dir, "nokernel", "#include \"qwenref_plugin.h\"\nint qwenref_plugin_abi(void) { return QWENREF_PLUGIN_ABI; }\n")
	notLib := filepath.Join(dir, "text.so")
	require.NoError(t, os.WriteFile(notLib, []byte("not an ELF file"), 0o644))
	for _, c := range []struct{ name, path, msg string }{
		{"p1", wrongABI, "ABI version 99"},
		{"p2", noABI, "does not export qwenref_plugin_abi"},
		{"p3", noKernel, "exports none of"},
		{"p4", notLib, "cannot load"},
		{"p5", filepath.Join(dir, "absent.so"), "no such file"},
		{"p6", dir, "not a regular file"},
	} {
		_, err := Load(c.name, c.path)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), "plugin "+c.name, c.name)
		assert.Contains(t, err.Error(), c.msg, c.name)
		assert.NotContains(t, model.PartChoices("conv"), c.name)
	}
}

// A library that exports conv only registers conv; loading it again under
// the same name is a no-op, under a taken name with another path an error;
// a non-zero return reaches the caller with the library's message.
func TestLoadRegistersWhatIsExported(t *testing.T) {
	dir := t.TempDir()
	src := `#include <stdio.h>
#include "qwenref_plugin.h"
int qwenref_plugin_abi(void) { return QWENREF_PLUGIN_ABI; }
int qwenref_conv(float *y, const float *x, int T, int C, const float *w, int K, float *state, char *err, int errlen) {
    snprintf(err, errlen, "conv refuses T=%d C=%d K=%d", T, C, K);
    return 7;
}
`
	so := cc(t, dir, "convonly", src)
	parts, err := Load("convonly", so)
	require.NoError(t, err)
	assert.Equal(t, []string{"conv"}, parts)
	assert.Contains(t, model.PartChoices("conv"), "convonly")
	assert.NotContains(t, model.PartChoices("delta"), "convonly")
	_, err = Load("convonly", so)
	assert.NoError(t, err)
	_, err = Load("convonly", cc(t, t.TempDir(), "convonly", src))
	assert.ErrorContains(t, err, "already taken")

	be, err := model.ParseBackend("chunked:conv=convonly")
	require.NoError(t, err)
	defer be.Close()
	y, x, w, st := make([]float32, 6), make([]float32, 6), make([]float32, 12), make([]float32, 12)
	err = be.Conv.Forward(y, x, w, conv1d.Dims{T: 2, C: 3, K: 4}, st)
	assert.ErrorContains(t, err, "plugin convonly qwenref_conv returned 7: conv refuses T=2 C=3 K=4")
	assert.Error(t, be.Conv.Forward(y[:5], x, w, conv1d.Dims{T: 2, C: 3, K: 4}, st), "lengths are checked before the call")
}

// A path without a slash names the file in the working directory, as the
// CLI's file check reads it (dlopen alone would search the library path).
func TestLoadRelativePath(t *testing.T) {
	dir := t.TempDir()
	so := cc(t, dir, "relconv", `#include "qwenref_plugin.h"
int qwenref_plugin_abi(void) { return QWENREF_PLUGIN_ABI; }
int qwenref_conv(float *y, const float *x, int T, int C, const float *w, int K, float *state, char *err, int errlen) { return 0; }
`)
	t.Chdir(dir)
	parts, err := Load("relconv", filepath.Base(so))
	require.NoError(t, err)
	assert.Equal(t, []string{"conv"}, parts)
}
