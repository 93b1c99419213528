package verify

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/weights"
)

// Every gradient golden, written and read back: the forward outputs from
// a backend (with the l2norm, varlen conv and gate conventions of --grad
// files) and the gradients from the naive Go backward meet the file's
// bars; a forward golden refuses RunGrad.
func TestGradGoldenRoundTrip(t *testing.T) {
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	defer be.Close()
	for _, c := range []struct {
		op string
		d  reference.VectorDims
		l2 bool
	}{
		{"gdn-core", reference.VectorDims{T: 70, NK: 1, NV: 2, DK: 8, DV: 4, SeqLens: []int{2, 65, 3}, DType: "bf16"}, true},
		{"gdn-core", reference.VectorDims{T: 9, NK: 1, NV: 2, DK: 8, DV: 4, DType: "f32"}, false},
		{"conv", reference.VectorDims{T: 10, C: 12, K: 4, SeqLens: []int{2, 8}, DType: "f16"}, false},
		{"attention", reference.VectorDims{T: 5, NH: 4, NKV: 2, D: 8, P: 3, DType: "f32"}, false},
	} {
		vec, err := reference.BuildGradVector(c.op, c.d, 5, false, c.l2)
		require.NoError(t, err, c.op)
		path := filepath.Join(t.TempDir(), c.op+".safetensors")
		require.NoError(t, WriteGolden(path, vec, "tiny", weights.WriteOptions{}))
		g, err := OpenGolden(path)
		require.NoError(t, err)
		require.True(t, g.IsGrad())
		fwd, err := g.Run(be)
		require.NoError(t, err, c.op)
		grads, err := g.RunGrad()
		require.NoError(t, err, c.op)
		assert.Len(t, grads, map[string]int{"gdn-core": 6, "conv": 3, "attention": 4}[c.op])
		for _, o := range append(fwd, grads...) {
			chk, err := g.Compare(o)
			require.NoError(t, err, o.Name)
			assert.True(t, chk.OK, "%s %s: %+v > %+v", c.op, o.Name, chk.Error, chk.Tolerance)
		}
		// A gradient off by half in one place is caught (1% of one value is
		// below an f16 file's rounding).
		grads[0].Data[0] = 1.5*grads[0].Data[0] + 0.1
		chk, err := g.Compare(grads[0])
		require.NoError(t, err)
		assert.False(t, chk.OK, "%s %s planted", c.op, grads[0].Name)
		require.NoError(t, g.Close())
	}
	g, err := OpenGolden(writeGolden(t, "conv", smallDims))
	require.NoError(t, err)
	defer g.Close()
	_, err = g.RunGrad()
	assert.ErrorContains(t, err, "--grad")
}

// --grad is for the core ops, --l2norm for gdn-core gradients only.
func TestBuildGoldenGradFlags(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	_, _, err = BuildGolden(GoldenSpec{Op: "gdn-layer", Config: cfg, T: 4, DType: "f32", Grad: true})
	assert.ErrorContains(t, err, "--grad applies to the core ops")
	_, _, err = BuildGolden(GoldenSpec{Op: "gdn-core", Config: cfg, T: 4, DType: "f32", L2Norm: true})
	assert.ErrorContains(t, err, "--l2norm")
	_, _, err = BuildGolden(GoldenSpec{Op: "gdn-core", Config: cfg, T: 4096, DType: "f32", Grad: true, MemLimit: 1 << 20, MemSource: "test"})
	assert.ErrorContains(t, err, "limit")
}
