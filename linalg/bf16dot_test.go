package linalg

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// TestNewBF16Compute: the product is the kernel cpu.BF16Choice picks
// (BlockedAMX, BlockedBF16Dot running VDPBF16PS, or the widening Blocked),
// BF16Kernel names it, and a QWENREF_BF16 this process cannot run is
// refused with the reason.
func TestNewBF16Compute(t *testing.T) {
	mm, err := NewBF16Compute()
	k, _, choiceErr := cpu.BF16Choice()
	info := BF16Kernel()
	t.Logf("bf16 kernel: %s", info)
	assert.True(t, strings.HasPrefix(info, k.String()+" ("), info)
	if choiceErr != nil {
		require.Error(t, err)
		assert.Nil(t, mm)
		assert.Equal(t, choiceErr.Error(), err.Error())
		assert.Contains(t, info, choiceErr.Error())
		return
	}
	require.NoError(t, err)
	switch k {
	case cpu.BF16AMX:
		assert.Equal(t, BlockedAMX{}, mm)
		assert.Contains(t, info, amxKernelName)
	case cpu.BF16AVX512:
		assert.Equal(t, BlockedBF16Dot{}, mm)
		assert.NotEqual(t, goBF16Dot, bf16DotKernels[0], "the VDPBF16PS kernel, not the Go model")
		assert.Contains(t, info, bf16DotKernels[0].name)
	default:
		assert.Equal(t, Blocked{}, mm)
		assert.Contains(t, info, gemmKernels[0].name)
	}
	r := rand.New(rand.NewPCG(25, 26))
	m, kk, n := 19, 300, 70
	x, w := randVec(r, m*kk), randWeights(r, n, kk, true)
	got := make([]float32, m*n)
	require.NoError(t, mm.MatMulT(got, x, m, w))
	assert.LessOrEqual(t, tensor.RelL2(got, roundedProduct(x, m, w)), 1.0/256)
}

func bf16DotVariants() []variant {
	var vs []variant
	tiny := &blocking{kc: 40, mc: 30, minParallel: 0}
	for _, gk := range bf16DotKernels {
		vs = append(vs,
			variant{gk.name + "-tiny", Blocked{Threads: 3, gemm: gk, blk: tiny}},
			variant{gk.name + "-mid", Blocked{Threads: 3, gemm: gk, blk: &midBlocking}},
			variant{gk.name + "-default", Blocked{gemm: gk}},
		)
	}
	return vs
}

// bf16Dot runs BlockedBF16Dot with the kernel and blocking of v.
func bf16Dot(v variant, y, x []float32, m int, w *tensor.Matrix) error {
	return BlockedBF16Dot{Threads: v.b.Threads, gemm: v.b.gemm, blk: v.b.blk}.MatMulT(y, x, m, w)
}

// TestBF16DotKernelsAgree: the assembly kernel must reproduce the pure-Go
// model of VDPBF16PS (goBF16Dot) bit for bit, on every ragged shape, for
// bf16 and float32 weights. Same blocking, so the same order of additions.
func TestBF16DotKernelsAgree(t *testing.T) {
	if len(bf16DotKernels) == 1 {
		t.Skip("no AVX512_BF16 kernel on this CPU: nothing to compare with the model")
	}
	r := rand.New(rand.NewPCG(21, 22))
	vs := bf16DotVariants()
	blks := []*blocking{{kc: 40, mc: 30}, &midBlocking, &defaultBlocking, &bf16DotBlocking}
	if testing.Short() {
		blks = blks[:1] // the pure-Go model is slow under -race
	}
	for _, s := range raggedShapes {
		m, k, n := s[0], s[1], s[2]
		if testing.Short() && m*k*n > 1e6 {
			continue
		}
		for _, bf16 := range []bool{false, true} {
			x := randVec(r, m*k)
			w := randWeights(r, n, k, bf16)
			for _, blk := range blks {
				want := make([]float32, m*n)
				require.NoError(t, BlockedBF16Dot{gemm: goBF16Dot, blk: blk}.MatMulT(want, x, m, w))
				for _, v := range vs {
					if v.b.gemm == goBF16Dot {
						continue // the model itself
					}
					got := make([]float32, m*n)
					require.NoError(t, BlockedBF16Dot{Threads: 3, gemm: v.b.gemm, blk: blk}.MatMulT(got, x, m, w))
					assert.Equal(t, want, got, "%s blk %d %s M=%d K=%d N=%d", v.name, blk.kc, dtypeName(bf16), m, k, n)
				}
			}
		}
	}
}

// TestBF16DotAccuracy states the numerics: against the exact product of the
// bf16-rounded operands it is an ordinary float32 sum (sumTol); against the
// float32 product of the unrounded x it is off by x's rounding, at most
// 2⁻⁹ relative per term, so about 2⁻⁹/√3 ≈ 1.1e-3 in relative L2 for random
// signs; 2⁻⁸ bounds it.
func TestBF16DotAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	m, k, n := 20, 5120, 48
	if testing.Short() {
		m = 4
	}
	x := randVec(r, m*k)
	w := randWeights(r, n, k, true)
	wf := w.ToFloat32()
	rounded, exact := make([]float32, m*n), make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var sr, se float64
			for q := 0; q < k; q++ {
				xr := float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(x[i*k+q])))
				sr += xr * float64(wf[j*k+q])
				se += float64(x[i*k+q]) * float64(wf[j*k+q])
			}
			rounded[i*n+j], exact[i*n+j] = float32(sr), float32(se)
		}
	}
	for _, v := range bf16DotVariants() {
		got := make([]float32, m*n)
		require.NoError(t, bf16Dot(v, got, x, m, w))
		eR, eX := tensor.RelL2(got, rounded), tensor.RelL2(got, exact)
		t.Logf("%s: rel L2 %.3g vs exact product of rounded operands, %.3g vs float32 x", v.name, eR, eX)
		assert.LessOrEqual(t, eR, sumTol(k), v.name)
		assert.LessOrEqual(t, eX, 1.0/256, v.name)
	}
}

func TestBF16DotEdgeCasesAndErrors(t *testing.T) {
	w := &tensor.Matrix{Rows: 3, Cols: 0, BF16: []uint16{}}
	y := []float32{1, 2, 3}
	require.NoError(t, BlockedBF16Dot{}.MatMulT(y, []float32{}, 1, w))
	assert.Equal(t, []float32{0, 0, 0}, y)
	w = &tensor.Matrix{Rows: 4, Cols: 5, BF16: make([]uint16, 20)}
	assert.Error(t, BlockedBF16Dot{}.MatMulT(make([]float32, 8), make([]float32, 9), 2, w))
	assert.Error(t, BlockedBF16Dot{}.MatMulT(nil, nil, 0, nil))
}

// TestDPStep pins the model of one VDPBF16PS half-step.
func TestDPStep(t *testing.T) {
	bf := func(f float32) uint32 { return uint32(tensor.Float32ToBF16(f)) }
	assert.Equal(t, float32(7), dpStep(1, bf(2), bf(3)))
	// A subnormal bf16 input reads as zero (DAZ).
	sub := uint32(0x0001) // smallest positive bf16 subnormal
	assert.Equal(t, float32(1), dpStep(1, sub, bf(1e30)))
	// A subnormal result is flushed to zero (FTZ), keeping its sign.
	r := dpStep(0, bf(-0x1p-70), bf(0x1p-60))
	assert.Equal(t, float32(0), r)
	assert.True(t, math.Signbit(float64(r)))
	// One rounding: 1 + 2⁻²⁴ + 2⁻⁷⁶ lies above the midpoint of 1 and
	// 1+2⁻²³, though its float64 sum is exactly that midpoint.
	assert.Equal(t, float32(1+0x1p-23), roundSum32(1, 0x1p-24+0x1p-76))
	assert.Equal(t, float32(1), roundSum32(1, 0x1p-24))         // a true tie goes to even
	assert.Equal(t, float32(1), roundSum32(1, 0x1p-24-0x1p-76)) // below the midpoint
	assert.Equal(t, float32(1+0x1p-23), roundSum32(1+0x1p-23, -0x1p-76))
}
