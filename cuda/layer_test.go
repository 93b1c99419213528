package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// randomLayer builds a GDN layer with bf16 projections scaled by 1/√in and
// non-trivial conv taps, gates and norm weights.
func randomLayer(r *rand.Rand, d gateddelta.LayerDims) *gateddelta.Layer {
	mat := func(rows, cols int) *tensor.Matrix {
		s := float32(1 / math.Sqrt(float64(cols)))
		b := make([]uint16, rows*cols)
		for i := range b {
			b[i] = tensor.Float32ToBF16(s * (2*r.Float32() - 1))
		}
		m, _ := tensor.NewMatrixBF16(rows, cols, b)
		return m
	}
	c, hv := d.ConvDim(), d.NV*d.DV
	return &gateddelta.Layer{Dims: d, W: gateddelta.LayerWeights{
		InProjQKV: mat(c, d.Hidden), InProjZ: mat(hv, d.Hidden), InProjB: mat(d.NV, d.Hidden),
		InProjA: mat(d.NV, d.Hidden), OutProj: mat(d.Hidden, hv),
		ConvW: uniform(r, c*d.ConvK, -0.5, 0.5), ALog: uniform(r, d.NV, -1, 1), DtBias: uniform(r, d.NV, -1, 1),
		NormW: uniform(r, d.DV, 0.5, 1.5),
	}}
}

// TestGDNLayerMatchesCPU runs a prefill, two decode steps and a multi-token
// continuation through the device layer (bf16 activations) and through
// gateddelta.Layer on the naive CPU kernels (fp32 activations, same bf16
// weights), carrying each side's state.
func TestGDNLayerMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(21, 22))
	dims := gateddelta.LayerDims{Hidden: 256, NK: 2, NV: 6, DK: 128, DV: 128, ConvK: 4, Eps: 1e-6}
	l := randomLayer(r, dims)
	cpu := gateddelta.Ops{MatMul: linalg.Naive{}, Conv: conv1d.Naive{}, Core: gateddelta.Naive{}}
	stC, stG := gateddelta.NewState(dims), gateddelta.NewState(dims)
	for step, tt := range []int{130, 1, 1, 70} {
		x := uniform(r, tt*dims.Hidden, -1, 1)
		want := make([]float32, len(x))
		if err := l.Forward(want, x, tt, stC, cpu, nil); err != nil {
			t.Fatal(err)
		}
		got := nans(len(x))
		if err := d.GDNLayer(got, x, tt, dims, &l.W, stG); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("gdn layer step %d (T=%d)", step, tt)
		check(t, name+" out", got, want, 1e-2)
		check(t, name+" rec state", stG.S, stC.S, 1e-2)
		check(t, name+" conv state", stG.Conv, stC.Conv, 1e-2)
	}
}

// TestGDNLayerOnCUDAOps plugs the host-slice CUDA kernels into the CPU
// layer (gateddelta.Ops), checking that they compose as the interfaces say.
func TestGDNLayerOnCUDAOps(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(23, 24))
	dims := gateddelta.LayerDims{Hidden: 256, NK: 2, NV: 6, DK: 128, DV: 128, ConvK: 4, Eps: 1e-6}
	l := randomLayer(r, dims)
	cpu := gateddelta.Ops{MatMul: linalg.Naive{}, Conv: conv1d.Naive{}, Core: gateddelta.Naive{}}
	for _, v := range []GDNVariant{ChunkF32, ChunkBF16, Recurrent} {
		gpu := gateddelta.Ops{MatMul: MatMul{d}, Conv: Conv{d}, Core: GatedDelta{d, v}}
		stC, stG := gateddelta.NewState(dims), gateddelta.NewState(dims)
		for _, tt := range []int{100, 1} {
			x := uniform(r, tt*dims.Hidden, -1, 1)
			want, got := make([]float32, len(x)), nans(len(x))
			if err := l.Forward(want, x, tt, stC, cpu, nil); err != nil {
				t.Fatal(err)
			}
			if err := l.Forward(got, x, tt, stG, gpu, nil); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("layer on cuda ops core=%s T=%d out", v, tt), got, want, 1e-2)
		}
	}
}
