package verify

import (
	"path/filepath"
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
		{"conv", reference.VectorDims{T: 9, C: 6, K: 4, SeqLens: []int{3, 6}, DType: "bf16", ConvBias: true}, false},
		{"gated-rmsnorm", reference.VectorDims{T: 7, NV: 3, DV: 16, DType: "f32"}, false},
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
		grads, err := g.RunGrad(nil)
		require.NoError(t, err, c.op)
		want := map[string]int{"gdn-core": 6, "conv": 3, "attention": 4, "gated-rmsnorm": 3}[c.op]
		if c.d.ConvBias {
			want = 4
		}
		assert.Len(t, grads, want)
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
	_, err = g.RunGrad(nil)
	assert.ErrorContains(t, err, "--grad")
}

// planted is the built-in float32 backward with one bug per op, each a
// mistake a kernel could make: the final state's gradient dropped (gdn,
// conv), the output gate left out of the backward (attention), the norm's
// ε 10⁴ times too large (gated RMSNorm).
type planted struct{ NaiveBackward }

func (p planted) GDNBackward(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal []float32, d gateddelta.Dims) error {
	return p.NaiveBackward.GDNBackward(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, nil, d)
}

func (p planted) ConvBackward(dx, dw, dbias, dstate, x, w, bias, state, dy, dfinal []float32, d conv1d.Dims) error {
	return p.NaiveBackward.ConvBackward(dx, dw, dbias, dstate, x, w, bias, state, dy, nil, d)
}

func (p planted) AttentionBackward(dq, dk, dv, dgate, q, k, v, gate, dout []float32, d attention.Dims, scale float32) error {
	return p.NaiveBackward.AttentionBackward(dq, dk, dv, dgate, q, k, v, nil, dout, d, scale)
}

func (p planted) GatedRMSNormBackward(dx, dz, dw, x, z, w, dy []float32, dim int, eps float32) error {
	return p.NaiveBackward.GatedRMSNormBackward(dx, dz, dw, x, z, w, dy, dim, eps*1e4)
}

// The built-in float32 backward is checked, not compared with itself:
// on every op its gradients differ from the file's (the float64
// reference) yet meet the bars, and each planted bug fails a named one.
func TestBuiltinBackwardIsSeparateAndPlantedBugsFail(t *testing.T) {
	for _, c := range []struct {
		op     string
		d      reference.VectorDims
		failed string
	}{
		{"gdn-core", reference.VectorDims{T: 9, NK: 1, NV: 2, DK: 8, DV: 4, DType: "f32"}, "dinitial_state"},
		{"conv", reference.VectorDims{T: 12, C: 8, K: 4, DType: "f32"}, "dx"},
		{"attention", reference.VectorDims{T: 6, NH: 4, NKV: 2, D: 16, P: 5, DType: "f32"}, "dq"},
		{"gated-rmsnorm", reference.VectorDims{T: 5, NV: 2, DV: 32, DType: "f32"}, "dx"},
	} {
		vec, err := reference.BuildGradVector(c.op, c.d, 11, false, false)
		require.NoError(t, err, c.op)
		path := filepath.Join(t.TempDir(), c.op+".safetensors")
		require.NoError(t, WriteGolden(path, vec, "tiny", weights.WriteOptions{}))
		g, err := OpenGolden(path)
		require.NoError(t, err)
		grads, err := g.RunGrad(NaiveBackward{})
		require.NoError(t, err, c.op)
		for _, o := range grads {
			chk, err := g.Compare(o)
			require.NoError(t, err)
			assert.True(t, chk.OK, "%s %s: %+v > %+v", c.op, o.Name, chk.Error, chk.Tolerance)
			assert.Positive(t, chk.Error.RelL2, "%s %s: the float32 backward equals the file: a copy of the reference?", c.op, o.Name)
		}
		bad, err := g.RunGrad(planted{})
		require.NoError(t, err, c.op)
		var failed []string
		for _, o := range bad {
			chk, err := g.Compare(o)
			require.NoError(t, err)
			if !chk.OK {
				failed = append(failed, o.Name)
			}
		}
		assert.Contains(t, failed, c.failed, "%s planted", c.op)
		require.NoError(t, g.Close())
	}
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
