package verify

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/weights"
)

// writeGolden builds op's vector at small dims and writes it to a
// temporary file.
func writeGolden(t *testing.T, op string, d reference.VectorDims) string {
	t.Helper()
	vec, err := reference.BuildVector(op, d, 5, false)
	require.NoError(t, err, op)
	path := filepath.Join(t.TempDir(), op+".safetensors")
	require.NoError(t, WriteGolden(path, vec, "tiny", weights.WriteOptions{}))
	return path
}

var smallDims = reference.VectorDims{T: 9, NK: 1, NV: 2, DK: 8, DV: 4, C: 12, K: 4, NH: 4, NKV: 2, D: 8, P: 3}

// offDelta, offConv and offAttn wrap the kernels with one wrong element in their output, as a
// buggy kernel might produce.
type offDelta struct{ gateddelta.Kernel }

func (k offDelta) Forward(out, q, kk, v, g, beta []float32, d gateddelta.Dims, state []float32) error {
	err := k.Kernel.Forward(out, q, kk, v, g, beta, d, state)
	out[3] += 0.01
	return err
}

type offConv struct{ conv1d.Kernel }

func (k offConv) Forward(y, x, w []float32, d conv1d.Dims, state []float32) error {
	err := k.Kernel.Forward(y, x, w, d, state)
	y[3] += 0.01
	return err
}

type offAttn struct{ attention.Kernel }

func (k offAttn) Forward(out, q, kk, v []float32, d attention.Dims, scale float32) error {
	err := k.Kernel.Forward(out, q, kk, v, d, scale)
	out[3] += 0.01
	return err
}

// Every core op's golden, written and read back, passes check on the
// naive and chunked kernels within its own bars, and a kernel with one
// wrong element fails at the output it touches.
func TestGoldenCheck(t *testing.T) {
	packed := smallDims
	packed.SeqLens, packed.DType = []int{4, 1, 4}, "bf16"
	layer := reference.LayerDims{T: 5, H: 16, I: 24, NK: 1, NV: 2, DK: 8, DV: 4, K: 4, NH: 2, NKV: 1, D: 8, Rot: 4, Theta: 1e4, Eps: 1e-6, DType: "f32"}
	files := map[string]string{
		"gdn-core": writeGolden(t, "gdn-core", smallDims), "gdn-core-packed": writeGolden(t, "gdn-core", packed),
		"conv": writeGolden(t, "conv", smallDims), "attention": writeGolden(t, "attention", smallDims),
	}
	vec, err := reference.BuildLayerVector("gdn-layer", layer, 3)
	require.NoError(t, err)
	files["gdn-layer"] = filepath.Join(t.TempDir(), "layer.safetensors")
	require.NoError(t, WriteGolden(files["gdn-layer"], vec, "tiny", weights.WriteOptions{}))
	for name, path := range files {
		g, err := OpenGolden(path)
		require.NoError(t, err, name)
		assert.Equal(t, "tiny", g.Meta["shape"], name)
		for _, spec := range []string{"naive", "chunked"} {
			be, err := model.ParseBackend(spec)
			require.NoError(t, err)
			checks, err := g.Check(be)
			require.NoError(t, err, "%s on %s", name, spec)
			require.NotEmpty(t, checks)
			for _, c := range checks {
				assert.True(t, c.OK, "%s on %s: %s %+v", name, spec, c.Name, c)
				assert.Positive(t, c.Tolerance.RelL2)
			}
		}
		be, err := model.ParseBackend("naive")
		require.NoError(t, err)
		be.Delta, be.Conv, be.Attn = offDelta{be.Delta}, offConv{be.Conv}, offAttn{be.Attn}
		checks, err := g.Check(be)
		require.NoError(t, err, name)
		assert.False(t, checks[0].OK, "%s: a wrong %s is caught", name, checks[0].Name)
		if name == "gdn-core" {
			assert.Equal(t, "out", checks[0].Name)
			assert.True(t, checks[1].OK, "final_state is not touched")
		}
		require.NoError(t, g.Close())
	}
}

// The bars ReadTolerance parses are the ones reference's builders wrote,
// for every output; a missing or malformed bar is an error naming its key.
func TestReadToleranceReadsWhatBuildersWrite(t *testing.T) {
	for _, op := range reference.VectorOps {
		vec, err := reference.BuildVector(op, smallDims, 5, false)
		require.NoError(t, err)
		outputs := 0
		for _, nt := range vec.Tensors {
			if _, ok := vec.Meta["tol."+nt.Name+".rel_l2"]; !ok {
				continue
			}
			outputs++
			tol, err := ReadTolerance(vec.Meta, nt.Name)
			require.NoError(t, err, "%s %s", op, nt.Name)
			assert.Positive(t, tol.RelL2)
			assert.GreaterOrEqual(t, tol.MaxAbsScaled, tol.RelL2)
		}
		assert.NotZero(t, outputs, op)
	}
	for _, bad := range []string{"", "x", "-1", "NaN", "+Inf", "1", "1e308"} { // a bar of 1 passes zeros
		_, err := ReadTolerance(map[string]string{"tol.out.rel_l2": bad, "tol.out.max_abs_scaled": "1e-5"}, "out")
		assert.ErrorContains(t, err, "metadata tol.out.rel_l2 is", bad)
	}
	_, err := ReadTolerance(map[string]string{"tol.out.rel_l2": "1e-5"}, "out")
	assert.ErrorContains(t, err, "tol.out.max_abs_scaled")
}

func TestParseCuSeqlens(t *testing.T) {
	segs, err := ParseCuSeqlens("0,37,337,338", 338)
	require.NoError(t, err)
	assert.Equal(t, []int{37, 300, 1}, segs)
	segs, err = ParseCuSeqlens(" 0, 5 ", 5)
	require.NoError(t, err)
	assert.Equal(t, []int{5}, segs)
	for _, c := range []struct {
		cu   string
		t    int
		want string
	}{
		{"0", 5, "want 0,…,T"},
		{"1,5", 5, "rising"},
		{"0,3,3,5", 5, "rising"},
		{"0,6", 5, "rising"},
		{"0,x", 5, "rising"},
		{"0,3", 5, "ends at 3, not T = 5"},
		{"0,1,2,3,4,5,6", 5, "want 0,…,T"},
	} {
		_, err := ParseCuSeqlens(c.cu, c.t)
		assert.ErrorContains(t, err, c.want, c.cu)
	}
	// A header may hold 100 MB of commas: refused before it is split
	// (which would allocate 16 bytes per comma).
	commas := strings.Repeat(",", 32<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = ParseCuSeqlens(commas, 5)
	runtime.ReadMemStats(&after)
	assert.ErrorContains(t, err, "want 0,…,T")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated")
}

// Metadata that does not describe the tensors is refused with the key or
// tensor named, before any kernel runs.
func TestGoldenRunRefusesBadMetadata(t *testing.T) {
	path := writeGolden(t, "conv", smallDims)
	g, err := OpenGolden(path)
	require.NoError(t, err)
	defer g.Close()
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	for _, c := range []struct {
		key, value, want string
	}{
		{"op", "matmul", `metadata op is "matmul"`},
		{"C", "13", "tensor x has shape [9 12], the metadata says [9 13]"},
		{"K", "-1", `metadata K is "-1", not a dimension`},
		{"T", "99999999999", "not a dimension"},
		{"T", "0", `metadata T is "0", not a dimension`}, // zero tokens would agree checking nothing
		{"op", "x\x1b[2J", `metadata op is "x\x1b[2J"`},
	} {
		old := g.Meta[c.key]
		g.Meta[c.key] = c.value
		_, err := g.Run(be)
		assert.ErrorContains(t, err, c.want, c.key)
		g.Meta[c.key] = old
	}
	delete(g.Meta, "tol.y.rel_l2")
	_, err = g.Check(be)
	assert.ErrorContains(t, err, "tol.y.rel_l2")
	_, err = OpenGolden(filepath.Join(t.TempDir(), "none.safetensors"))
	assert.ErrorContains(t, err, "none.safetensors")
}

// LayerGoldenDims takes every width from the config.
func TestLayerGoldenDims(t *testing.T) {
	cfg, err := model.ShapeConfig("0.8b")
	require.NoError(t, err)
	d := LayerGoldenDims(cfg, "decoder-layer", false, 16, "bf16")
	assert.Equal(t, reference.LayerDims{T: 16, H: 1024, I: 3584, NK: 16, NV: 16, DK: 128, DV: 128, K: 4, NH: 8, NKV: 2, D: 256,
		Rot: 64, Theta: 1e7, Eps: 1e-6, DType: "bf16"}, d)
	assert.True(t, LayerGoldenDims(cfg, "attention-layer", false, 16, "f32").Attention)
	assert.True(t, LayerGoldenDims(cfg, "decoder-layer", true, 16, "f32").Attention)
}

// An expected tensor of the wrong size is named with its shape: the file
// is broken, and no error figure is made up for it.
func TestGoldenWrongSizeExpected(t *testing.T) {
	vec, err := reference.BuildVector("conv", smallDims, 5, false)
	require.NoError(t, err)
	for i, nt := range vec.Tensors {
		if nt.Name == "y" {
			vec.Tensors[i].Data = nt.Data[:len(nt.Data)-smallDims.C]
			vec.Tensors[i].Shape = []int{smallDims.T - 1, smallDims.C}
		}
	}
	path := filepath.Join(t.TempDir(), "short.safetensors")
	require.NoError(t, WriteGolden(path, vec, "tiny", weights.WriteOptions{}))
	g, err := OpenGolden(path)
	require.NoError(t, err)
	defer g.Close()
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	_, err = g.Check(be)
	require.ErrorContains(t, err, "expected tensor y has shape [8 12] (96 values), but the op gives 108 values")
}
