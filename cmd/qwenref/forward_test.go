package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

const goldenRoot = "../../testdata/golden"

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func writeIDs(t *testing.T, dir string, ids any) string {
	p := filepath.Join(dir, "ids.json")
	data, err := json.Marshal(ids)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// The CLI must reproduce transformers' logits (relative L2 ≤ 1e-4, the
// issue's bar for the end-to-end path) on every golden checkpoint,
// including the sharded bf16 hub layout.
// The backend grammar's part swaps go through the same command: the
// unfused GDN core and conv, and the per-token recurrence, must reproduce
// the goldens as the default chunked backend does.
func TestForwardMatchesGoldens(t *testing.T) {
	for _, c := range []struct{ name, backend string }{
		{"causal-f32-t70-b2", "chunked"}, {"hub-bf16-sharded", "chunked"}, {"causal-f16-t130", "chunked"},
		{"causal-f32-t70-b2", "chunked:delta=naive:conv=naive"}, {"hub-bf16-sharded", "chunked:delta=recurrent"},
	} {
		name := c.name
		t.Run(name+"/"+c.backend, func(t *testing.T) {
			dir := filepath.Join(goldenRoot, name)
			var in struct {
				IDs [][]int `json:"ids"`
			}
			data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(data, &in))
			tmp := t.TempDir()
			out := filepath.Join(tmp, "out.safetensors")
			code, _, stderr := runCLI("forward", "--model", dir, "--ids-json", writeIDs(t, tmp, in.IDs), "--out", out, "--backend", c.backend)
			require.Equal(t, 0, code, stderr)

			got, err := weights.Open(out)
			require.NoError(t, err)
			defer got.Close()
			want, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
			require.NoError(t, err)
			defer want.Close()
			gl, gshape, err := got.Float32("logits")
			require.NoError(t, err)
			wl, wshape, err := want.Float32("logits")
			require.NoError(t, err)
			assert.Equal(t, wshape, gshape)
			rel := tensor.RelL2(gl, wl)
			t.Logf("%s: logits rel L2 %.2e", name, rel)
			assert.LessOrEqual(t, rel, 1e-4)
			_, hshape, err := got.Float32("hidden")
			require.NoError(t, err)
			assert.Equal(t, []int{gshape[0], gshape[1]}, hshape[:2])
		})
	}
}

func TestForwardErrors(t *testing.T) {
	dir := filepath.Join(goldenRoot, "causal-f16-t130")
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out.safetensors")
	good := writeIDs(t, tmp, [][]int{{1, 2, 3}})
	bad := func(name string, content string) string {
		p := filepath.Join(tmp, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	for _, c := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"missing model", []string{"forward", "--ids-json", good, "--out", out}, 2, "missing --model"},
		{"unknown flag", []string{"forward", "--nope"}, 2, "flag provided but not defined"},
		{"no such dir", []string{"forward", "--model", filepath.Join(tmp, "none"), "--ids-json", good, "--out", out}, 1, "no such directory"},
		{"id out of range", []string{"forward", "--model", dir, "--ids-json", bad("r.json", "[[1, 96]]"), "--out", out}, 1, "token id 96 at position 1 is outside the vocabulary"},
		{"empty", []string{"forward", "--model", dir, "--ids-json", bad("e.json", "[]"), "--out", out}, 1, "empty input"},
		{"ragged", []string{"forward", "--model", dir, "--ids-json", bad("g.json", "[[1,2],[3]]"), "--out", out}, 1, "equal length"},
		{"negative", []string{"forward", "--model", dir, "--ids-json", bad("n.json", "[[1,-2]]"), "--out", out}, 1, "non-negative"},
		{"bad backend", []string{"forward", "--model", dir, "--ids-json", good, "--out", out, "--backend", "tpu"}, 1, `unknown backend "tpu"`},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
	} {
		code, _, stderr := runCLI(c.args...)
		assert.Equal(t, c.code, code, "%s: %s", c.name, stderr)
		assert.Contains(t, stderr, c.contains, c.name)
		_, err := os.Stat(out)
		assert.True(t, os.IsNotExist(err), "%s: no output file may be left behind", c.name)
	}
}

func TestHelpTeaches(t *testing.T) {
	code, stdout, _ := runCLI("help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "forward")
	for _, cmd := range []string{"forward", "run", "chat", "prompt", "perplexity", "generate"} {
		for _, h := range []string{"-h", "--help"} {
			code, stdout, stderr := runCLI(cmd, h)
			assert.Equal(t, 0, code, cmd)
			assert.Contains(t, stdout, "Example", "%s %s: help is output, on stdout", cmd, h)
			assert.Empty(t, stderr, cmd)
		}
	}
}

// The common flags have llama.cpp's one-letter spellings where a command
// has the long one: -m, -p, -n, -t.
func TestShortFlags(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	args := []string{"run", "--compare", "none", "--quiet"}
	_, long, _ := runCLI(append(args, "--prompt", "The gated", "--max-new-tokens", "3")...)
	code, short, stderr := runCLI(append(args, "-p", "The gated", "-n", "3", "-t", "1")...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, long, short)
	assert.Equal(t, 1, runtime.GOMAXPROCS(0))
	dir := filepath.Join(goldenRoot, "hub-bf16-sharded")
	code, stdout, stderr := runCLI("generate", "-m", dir, "--ids", "5,17", "-n", "2", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 2, strings.Count(stdout, ",")+1)
	code, _, stderr = runCLI("forward", "-p", "x")
	assert.Equal(t, 2, code, "forward has no --prompt, so no -p")
	assert.Contains(t, stderr, "-p")
}

// The "→ OUT" line shows --out with its controls escaped, as every message
// shows a path: a name cannot recolour or retitle the terminal.
func TestForwardOutLineEscaped(t *testing.T) {
	dir := filepath.Join(goldenRoot, "causal-f32-t70-b2")
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out\x1b]0;pwned\x07.safetensors")
	code, _, stderr := runCLI("forward", "--model", dir, "--ids", "5,17", "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, `→ `+tmp+`/out\x1b]0;pwned\a.safetensors`)
	assert.NotContains(t, stderr, "\x1b")
}
