package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/verify"
	"github.com/qwenref/qwenref/weights"
)

// goldenFile is a test vector read back: its tensors, shapes and metadata.
type goldenFile struct {
	t      map[string][]float32
	shapes map[string][]int
	meta   map[string]string
}

// readGolden reads a test vector through weights.Open (as a user would)
// and its header's metadata directly, checking every tensor is F32 (BF16
// inputs in a bf16 file; outputs are always F32).
func readGolden(t *testing.T, path string) goldenFile {
	t.Helper()
	st, err := weights.Open(path)
	require.NoError(t, err)
	defer st.Close()
	g := goldenFile{t: map[string][]float32{}, shapes: map[string][]int{}}
	for _, name := range st.Names() {
		info, _ := st.Info(name)
		if (info.DType != "BF16" && info.DType != "F16") || name == "out" || name == "y" || name == "final_state" {
			assert.Equal(t, "F32", info.DType, name)
		}
		data, shape, err := st.Float32(name)
		require.NoError(t, err)
		g.t[name], g.shapes[name] = data, shape
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(raw)
	var hdr struct {
		Meta map[string]string `json:"__metadata__"`
	}
	require.NoError(t, json.Unmarshal(raw[8:8+n], &hdr))
	g.meta = hdr.Meta
	return g
}

func (g goldenFile) dim(t *testing.T, key string) int {
	v, err := strconv.Atoi(g.meta[key])
	require.NoError(t, err, "metadata %s", key)
	return v
}

// The naive float32 kernels, run on a file's stored inputs, must reproduce
// its stored float64-reference outputs. The bar is 2e-6 relative L2: float32
// rounding of these sums gives ~1e-7 (reference package tests), while a
// wrong layout, convention or state row misses by orders of magnitude.
const goldenTol = 2e-6

func TestGoldenGDNCoreRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "gdn.safetensors")
	code, stdout, stderr := runCLI("golden", "--op", "gdn-core", "--nk", "2", "--nv", "4", "--dk", "16", "--dv", "8",
		"--seq", "70", "--seed", "3", "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "initial_state")
	g := readGolden(t, out)

	d := gateddelta.Dims{T: 70, NK: 2, NV: 4, DK: 16, DV: 8}
	assert.Equal(t, map[string][]int{
		"q": {70, 2, 16}, "k": {70, 2, 16}, "v": {70, 4, 8}, "g": {70, 4}, "beta": {70, 4},
		"initial_state": {4, 16, 8}, "out": {70, 4, 8}, "final_state": {4, 16, 8},
	}, g.shapes)
	assert.Equal(t, "gdn-core", g.meta["op"])
	assert.Equal(t, d, gateddelta.Dims{T: g.dim(t, "T"), NK: g.dim(t, "NK"), NV: g.dim(t, "NV"), DK: g.dim(t, "DK"), DV: g.dim(t, "DV")})

	// The Kernel contract: k unit rows, q rows of norm dk^-1/2, g ≤ 0, β ∈ (0,1).
	for r := 0; r < 70*2; r++ {
		assert.InDelta(t, 0.25, norm2(g.t["q"][r*16:(r+1)*16]), 1e-6, "q row %d", r)
		assert.InDelta(t, 1, norm2(g.t["k"][r*16:(r+1)*16]), 1e-6, "k row %d", r)
	}
	for i := range g.t["g"] {
		assert.LessOrEqual(t, g.t["g"][i], float32(0))
		assert.True(t, g.t["beta"][i] > 0 && g.t["beta"][i] < 1)
	}
	assert.NotZero(t, norm2(g.t["initial_state"]), "a random initial state by default")

	o := make([]float32, len(g.t["out"]))
	s := append([]float32(nil), g.t["initial_state"]...)
	require.NoError(t, gateddelta.Naive{}.Forward(o, g.t["q"], g.t["k"], g.t["v"], g.t["g"], g.t["beta"], d, s))
	assert.Less(t, tensor.RelL2(o, g.t["out"]), goldenTol, "out")
	assert.Less(t, tensor.RelL2(s, g.t["final_state"]), goldenTol, "final_state")
	// And the file is not trivially satisfied: without the initial state the
	// outputs are clearly different.
	clear(s)
	require.NoError(t, gateddelta.Naive{}.Forward(o, g.t["q"], g.t["k"], g.t["v"], g.t["g"], g.t["beta"], d, s))
	assert.Greater(t, tensor.RelL2(o, g.t["out"]), 1e-3)
}

func TestGoldenConvRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "conv.safetensors")
	code, _, stderr := runCLI("golden", "--op", "conv", "--channels", "24", "--kernel", "4", "--seq", "9", "--out", out)
	require.Equal(t, 0, code, stderr)
	g := readGolden(t, out)
	assert.Equal(t, map[string][]int{
		"x": {9, 24}, "weight": {24, 4}, "initial_state": {4, 24}, "y": {9, 24}, "final_state": {4, 24},
	}, g.shapes)
	assert.Equal(t, []string{"24", "4"}, []string{g.meta["C"], g.meta["K"]})
	y := make([]float32, 9*24)
	s := append([]float32(nil), g.t["initial_state"]...)
	require.NoError(t, conv1d.Naive{}.Forward(y, g.t["x"], g.t["weight"], conv1d.Dims{T: 9, C: 24, K: 4}, s))
	assert.Less(t, tensor.RelL2(y, g.t["y"]), goldenTol)
	assert.Equal(t, g.t["final_state"], s, "the final state is the last K inputs, exactly")
}

func TestGoldenAttentionRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "attn.safetensors")
	code, _, stderr := runCLI("golden", "--op", "attention", "--heads", "6", "--kv-heads", "2", "--head-dim", "16",
		"--seq", "5", "--past", "11", "--out", out)
	require.Equal(t, 0, code, stderr)
	g := readGolden(t, out)
	assert.Equal(t, map[string][]int{"q": {5, 6, 16}, "k": {16, 2, 16}, "v": {16, 2, 16}, "out": {5, 6, 16}}, g.shapes)
	scale, err := strconv.ParseFloat(g.meta["scale"], 32)
	require.NoError(t, err)
	assert.Equal(t, float32(0.25), float32(scale))
	d := attention.Dims{T: 5, S: g.dim(t, "S"), NH: 6, NKV: 2, D: 16}
	assert.Equal(t, 16, d.S)
	o := make([]float32, 5*6*16)
	require.NoError(t, attention.Naive{}.Forward(o, g.t["q"], g.t["k"], g.t["v"], d, float32(scale)))
	assert.Less(t, tensor.RelL2(o, g.t["out"]), goldenTol)
}

// --shape takes the dimensions of a named model shape; same seed, same
// bytes; another seed, other bytes.
func TestGoldenShapeAndDeterminism(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	for _, p := range []struct{ path, seed string }{{a, "5"}, {b, "5"}, {c, "6"}} {
		code, _, stderr := runCLI("golden", "--op", "conv", "--shape", "27b", "--seq", "2", "--seed", p.seed, "--zero-state", "--out", p.path)
		require.Equal(t, 0, code, stderr)
	}
	g := readGolden(t, a)
	assert.Equal(t, []int{2, 10240}, g.shapes["x"], "27B conv channels 2·16·128 + 48·128")
	assert.Equal(t, []int{10240, 4}, g.shapes["weight"])
	assert.Equal(t, "27b", g.meta["shape"])
	assert.Zero(t, norm2(g.t["initial_state"]), "--zero-state")
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	cb, _ := os.ReadFile(c)
	assert.Equal(t, ab, bb)
	assert.NotEqual(t, ab, cb)
}

func TestGoldenErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.safetensors")
	for _, c := range []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"no op", []string{"--out", out}, 2, "--op must be"},
		{"bad op", []string{"--op", "matmul", "--out", out}, 2, `not "matmul"`},
		{"no out", []string{"--op", "conv"}, 2, "missing --out"},
		{"bad seq", []string{"--op", "conv", "--seq", "0", "--out", out}, 2, "--seq must be at least 1"},
		{"foreign override", []string{"--op", "conv", "--nk", "2", "--out", out}, 2, "--nk does not apply to --op conv"},
		{"negative override", []string{"--op", "gdn-core", "--dk", "-1", "--out", out}, 2, "--dk must be positive"},
		{"bad shape", []string{"--op", "conv", "--shape", "70b", "--out", out}, 1, `unknown shape "70b"`},
		{"bad ratio", []string{"--op", "gdn-core", "--nk", "3", "--nv", "4", "--out", out}, 1, "multiple of --nk"},
		{"bad gqa", []string{"--op", "attention", "--heads", "5", "--kv-heads", "2", "--out", out}, 1, "multiple of --kv-heads"},
		{"bad dir", []string{"--op", "conv", "--out", filepath.Join(out, "sub", "f")}, 1, ""},
		{"bad dtype", []string{"--op", "conv", "--dtype", "fp8", "--out", out}, 2, "--dtype must be"},
		{"seqlens not gdn", []string{"--op", "conv", "--seqlens", "3,4", "--out", out}, 2, "gdn-core only"},
		{"seqlens vs seq", []string{"--op", "gdn-core", "--seqlens", "3,4", "--seq", "8", "--out", out}, 2, "disagrees with --seqlens"},
		{"seqlens zero", []string{"--op", "gdn-core", "--seqlens", "3,0", "--out", out}, 2, "positive lengths"},
		{"layer override", []string{"--op", "gdn-layer", "--nk", "2", "--out", out}, 2, "--nk does not apply"},
		{"bad kind", []string{"--op", "decoder-layer", "--kind", "moe", "--out", out}, 2, "--kind must be"},
		{"kind elsewhere", []string{"--op", "conv", "--kind", "gdn", "--out", out}, 2, "--kind applies"},
		{"kind on a mixer op", []string{"--op", "gdn-layer", "--kind", "attention", "--out", out}, 2, "--kind applies"},
		{"layer too big", []string{"--op", "decoder-layer", "--shape", "27b", "--seq", "60000", "--max-memory", "1", "--out", out}, 1, "memory limit"},
	} {
		code, _, stderr := runCLI(append([]string{"golden"}, c.args...)...)
		assert.Equal(t, c.code, code, "%s: %s", c.name, stderr)
		assert.Contains(t, stderr, c.contains, c.name)
		_, err := os.Stat(out)
		assert.True(t, os.IsNotExist(err), "%s: no file may be left behind", c.name)
	}
}

// Inputs of a bf16 or f16 file are exactly values of that dtype (bf16
// ones stored as BF16, f16 ones as F16), the outputs F32, and the file records a bar per
// output that qwenref's kernels meet; an f32 file's bars stay tight.
func TestGoldenDTypes(t *testing.T) {
	dir := t.TempDir()
	for _, dt := range []string{"f32", "bf16", "f16"} {
		path := filepath.Join(dir, dt+".safetensors")
		code, stdout, stderr := runCLI("golden", "--op", "gdn-core", "--dtype", dt, "--seq", "40", "--out", path)
		require.Equal(t, 0, code, stderr)
		g := readGolden(t, path)
		assert.Equal(t, dt, g.meta["dtype"])
		for _, name := range []string{"q", "k", "v", "g", "beta", "initial_state"} {
			x := slices.Clone(g.t[name])
			require.NoError(t, reference.RoundTo(dt, x))
			assert.Equal(t, g.t[name], x, "%s %s holds %s values", dt, name, dt)
		}
		if dt == "bf16" {
			assert.Contains(t, stdout, "q             BF16")
		}
		assert.Contains(t, stdout, "out           F32")
		for _, out := range []string{"out", "final_state"} {
			tol, err := verify.ReadTolerance(g.meta, out)
			require.NoError(t, err)
			switch dt {
			case "f32":
				assert.Less(t, tol.RelL2, 1e-5, "f32 bars stay float32-tight")
			case "bf16":
				assert.Greater(t, tol.RelL2, 1e-3, "a bf16 output's own rounding is ~1.5e-3")
				assert.Less(t, tol.RelL2, 2e-2)
			}
		}
	}
}

// Packed sequences: one state per sequence, cu_seqlens in the metadata,
// and each sequence equals the same sequence written on its own.
func TestGoldenSeqlensPacksIndependentSequences(t *testing.T) {
	dir := t.TempDir()
	packed := filepath.Join(dir, "packed.safetensors")
	code, _, stderr := runCLI("golden", "--op", "gdn-core", "--seqlens", "37,30,1", "--zero-state", "--out", packed)
	require.Equal(t, 0, code, stderr)
	g := readGolden(t, packed)
	assert.Equal(t, "0,37,67,68", g.meta["cu_seqlens"])
	assert.Equal(t, "68", g.meta["T"])
	nv, dk, dv := g.dim(t, "NV"), g.dim(t, "DK"), g.dim(t, "DV")
	assert.Equal(t, []int{3, nv, dk, dv}, g.shapes["final_state"])
	// The last sequence (1 token, zero state): o = β v k̂ᵀq̂ per head, and
	// the state is β k vᵀ; checked here through the float64 recurrence on
	// that token alone.
	q, k, v := g.t["q"][67*2*dk:], g.t["k"][67*2*dk:], g.t["v"][67*nv*dv:]
	out := make([]float64, nv*dv)
	st := make([]float64, nv*dk*dv)
	require.NoError(t, reference.GatedDeltaRule(out, reference.Widen(q), reference.Widen(k), reference.Widen(v),
		reference.Widen(g.t["g"][67*nv:]), reference.Widen(g.t["beta"][67*nv:]), gateddelta.Dims{T: 1, NK: 2, NV: nv, DK: dk, DV: dv}, st))
	assert.Less(t, reference.RelL2(g.t["out"][67*nv*dv:], out), 1e-6)
	assert.Less(t, reference.RelL2(g.t["final_state"][2*nv*dk*dv:], st), 1e-6, "the third state is that token's alone")
	code, _, stderr = runCLI("check", packed, "--backend", "chunked")
	assert.Equal(t, 0, code, stderr)
}

// Every layer op writes its weights under checkpoint names and passes
// check on naive and chunked, f32 and bf16.
func TestGoldenLayerOps(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		has  string
	}{
		{[]string{"--op", "gdn-layer"}, "linear_attn.in_proj_qkv.weight"},
		{[]string{"--op", "attention-layer", "--dtype", "bf16"}, "self_attn.q_norm.weight"},
		{[]string{"--op", "decoder-layer"}, "mlp.down_proj.weight"},
		{[]string{"--op", "decoder-layer", "--kind", "attention", "--dtype", "bf16", "--seq", "9"}, "self_attn.o_proj.weight"},
	} {
		path := filepath.Join(dir, strings.Join(c.args, "_")+".safetensors")
		code, _, stderr := runCLI(append([]string{"golden", "--out", path}, c.args...)...)
		require.Equal(t, 0, code, stderr)
		g := readGolden(t, path)
		assert.Contains(t, g.t, c.has, c.args)
		assert.Equal(t, g.shapes["x"], g.shapes["out"])
		for _, be := range []string{"naive", "chunked"} {
			code, stdout, stderr := runCLI("check", path, "--backend", be)
			assert.Equal(t, 0, code, "%v on %s: %s%s", c.args, be, stdout, stderr)
		}
	}
}

func norm2(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}
