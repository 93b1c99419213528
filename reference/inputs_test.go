package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// The generators must deliver exactly the contract gateddelta.Kernel
// states; a kernel test on inputs outside it proves nothing.
func TestGDNInputsObeyTheContract(t *testing.T) {
	d := gateddelta.Dims{T: 37, NK: 2, NV: 6, DK: 16, DV: 8}
	in, err := NewGDNInputs(3, d, GDNOptions{WithState: true})
	require.NoError(t, err)
	for name, x := range map[string][]float32{"q": in.Q, "k": in.K} {
		want := 1.0
		if name == "q" {
			want = 1 / math.Sqrt(float64(d.DK))
		}
		for r := 0; r < d.T*d.NK; r++ {
			var ss float64
			for _, v := range x[r*d.DK : (r+1)*d.DK] {
				ss += float64(v) * float64(v)
			}
			require.InDelta(t, want, math.Sqrt(ss), 1e-6, "%s row %d norm", name, r)
		}
	}
	for i := range in.G {
		require.LessOrEqual(t, in.G[i], float32(0), "g[%d]", i)
		require.True(t, in.Beta[i] > 0 && in.Beta[i] < 1, "beta[%d] = %v", i, in.Beta[i])
	}
	var nonzero bool
	for _, v := range in.State {
		nonzero = nonzero || v != 0
	}
	assert.True(t, nonzero, "WithState gives a non-zero state")

	again, err := NewGDNInputs(3, d, GDNOptions{WithState: true})
	require.NoError(t, err)
	assert.Equal(t, in, again, "same seed, same inputs")
	other, err := NewGDNInputs(4, d, GDNOptions{WithState: true})
	require.NoError(t, err)
	assert.NotEqual(t, in.V, other.V, "another seed, other inputs")

	zero, err := NewGDNInputs(3, d, GDNOptions{})
	require.NoError(t, err)
	for _, v := range zero.State {
		require.Zero(t, v)
	}
}

func TestInputsRefuseBadDims(t *testing.T) {
	for _, d := range []gateddelta.Dims{
		{T: 1, NK: 2, NV: 3, DK: 4, DV: 4},                   // NV not a multiple of NK
		{T: -1, NK: 1, NV: 1, DK: 4, DV: 4},                  // negative T
		{T: 1 << 30, NK: 1, NV: 1 << 20, DK: 1 << 20, DV: 4}, // overflowing products
	} {
		_, err := NewGDNInputs(1, d, GDNOptions{})
		assert.Error(t, err, "%+v", d)
	}
	_, err := NewConvInputs(1, 1<<30, 1<<30, 4, false)
	assert.Error(t, err)
	_, err = NewAttentionInputs(1, attention.Dims{T: 2, S: 1, NH: 1, NKV: 1, D: 4})
	assert.Error(t, err, "S < T")
}

// Each generator's Reference agrees with the float32 naive kernels, which
// ties the vectors `qwenref golden` writes to the same contract.
func TestBuildVectorOps(t *testing.T) {
	d := VectorDims{T: 9, NK: 1, NV: 2, DK: 8, DV: 4, C: 12, K: 4, NH: 4, NKV: 2, D: 8, P: 3}
	for _, op := range VectorOps {
		v, err := BuildVector(op, d, 5, false)
		require.NoError(t, err, op)
		assert.Equal(t, op, v.Meta["op"])
		for _, nt := range v.Tensors {
			n := 1
			for _, s := range nt.Shape {
				n *= s
			}
			assert.Len(t, nt.Data, n, "%s %s", op, nt.Name)
		}
	}
	_, err := BuildVector("nosuch", d, 1, false)
	assert.ErrorContains(t, err, "unknown op")
}
