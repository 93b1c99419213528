package linalg

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// levelKernels names the GEMM and GEMV kernels each level must run.
var levelKernels = map[cpu.Level][2]string{
	cpu.AVX512:   {"avx512asm14x32", "avx512asm8"},
	cpu.AVX2:     {"avx2asm6x16", "avx2asm8"},
	cpu.NEON:     {"neonasm8x12", "neonasm8"},
	cpu.Portable: {"go4x2", "go"},
}

// TestKernelsMatchLevel proves that the kernels in use are those of the
// level internal/cpu selected, and that a QWENREF_CPU override is that
// level: run it once per level (QWENREF_CPU=avx512|avx2|portable, or
// neon|portable on arm64).
func TestKernelsMatchLevel(t *testing.T) {
	level := cpu.Selected()
	if v := os.Getenv(cpu.EnvVar); v != "" {
		require.NoError(t, cpu.Check(), "%s=%s", cpu.EnvVar, v)
		require.Equal(t, strings.ToLower(strings.TrimSpace(v)), level.String())
	}
	want, ok := levelKernels[level]
	require.True(t, ok, "no kernels listed for level %s", level)
	assert.Equal(t, want[0], gemmKernels[0].name, "GEMM kernel at %s", level)
	assert.Equal(t, want[1], gemvKernels[0].name, "GEMV kernel at %s", level)
	assert.Equal(t, level, gemmKernels[0].level)
	assert.Equal(t, level, gemvKernels[0].level)
	for _, k := range gemmKernels {
		assert.True(t, k.level == cpu.Portable || k.level == level || (level == cpu.AVX512 && k.level == cpu.AVX2),
			"GEMM kernel %s (%s) registered at level %s", k.name, k.level, level)
	}
	for _, k := range gemvKernels {
		assert.True(t, k.level == cpu.Portable || k.level == level || (level == cpu.AVX512 && k.level == cpu.AVX2),
			"GEMV kernel %s (%s) registered at level %s", k.name, k.level, level)
	}
	// The AVX-512 packing transposes run at the AVX-512 level only.
	assert.Equal(t, level == cpu.AVX512, tposeF32 != nil, "AVX-512 packing at level %s", level)
	assert.Equal(t, level == cpu.AVX512 || level == cpu.AVX2, tpose8F32 != nil, "AVX2 packing at level %s", level)
	assert.Equal(t, level == cpu.NEON, tpose4F32 != nil, "NEON packing at level %s", level)
	// The VDPBF16PS kernel runs exactly when internal/cpu allows it, and
	// neither it nor AMX below avx512.
	assert.Equal(t, cpu.HasBF16(), bf16DotKernels[0] != goBF16Dot)
	bk, _, _ := cpu.BF16Choice()
	if level != cpu.AVX512 {
		assert.Equal(t, cpu.BF16Widen, bk, "bf16 kernel at level %s", level)
		assert.Error(t, cpu.AMX(), "AMX at level %s", level)
	}
	info := KernelInfo()
	assert.Contains(t, info, "gemm "+want[0])
	assert.Contains(t, info, "gemv "+want[1])
	assert.Equal(t, bk != cpu.BF16Widen, strings.Contains(info, "bf16 compute "), info)
	t.Logf("level %s: %s; bf16 kernel %s", cpu.Describe(), info, BF16Kernel())
}

// TestKernelsSmallM runs every kernel this build and level can run against
// Naive for each M from 1 to 20 (every bottom-edge row count of every
// tile), with K and N prime so no K step, unroll or column panel divides
// them, for f32 and bf16 weights.
func TestKernelsSmallM(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, kn := range [][2]int{{37, 45}, {131, 67}} {
		k, n := kn[0], kn[1]
		for m := 1; m <= 20; m++ {
			for _, bf16 := range []bool{false, true} {
				x := randVec(r, m*k)
				w := randWeights(r, n, k, bf16)
				want := make([]float32, m*n)
				require.NoError(t, Naive{}.MatMulT(want, x, m, w))
				for _, v := range variants() {
					got := make([]float32, m*n)
					require.NoError(t, v.b.MatMulT(got, x, m, w))
					assert.LessOrEqual(t, tensor.RelL2(got, want), sumTol(k),
						"%s %s M=%d K=%d N=%d", v.name, dtypeName(bf16), m, k, n)
				}
			}
		}
	}
}

// TestPackTransposers: the register-tile transposes this level packs with
// must give exactly the scalar packing, for every row count of an x panel
// (including the masked last block) and every column count of a W panel.
func TestPackTransposers(t *testing.T) {
	if tposeF32 == nil && tpose8F32 == nil && tpose4F32 == nil {
		t.Skip("no packing transposes at this level")
	}
	scalar := func(f func()) {
		a, b, c, d, e, g := tposeF32, tposeBF16, tpose8F32, tpose8BF16, tpose4F32, tpose4BF16
		tposeF32, tposeBF16, tpose8F32, tpose8BF16, tpose4F32, tpose4BF16 = nil, nil, nil, nil, nil, nil
		defer func() { tposeF32, tposeBF16, tpose8F32, tpose8BF16, tpose4F32, tpose4BF16 = a, b, c, d, e, g }()
		f()
	}
	r := rand.New(rand.NewPCG(33, 34))
	const ldx = 90
	x := randVec(r, 17*ldx)
	for rows := 1; rows <= 16; rows++ {
		for _, kc := range []int{8, 13, 16, 40, 77} {
			got, want := make([]float32, rows*kc), make([]float32, rows*kc)
			packA(got, x, ldx, 1, rows, 3, kc)
			scalar(func() { packA(want, x, ldx, 1, rows, 3, kc) })
			require.Equal(t, want, got, "packA rows=%d kc=%d", rows, kc)
		}
	}
	for _, nr := range []int{12, 16, 32} {
		for cols := 1; cols <= nr; cols++ {
			for _, bf16 := range []bool{false, true} {
				w := randWeights(r, 40, 60, bf16)
				got, want := make([]float32, nr*37), make([]float32, nr*37)
				for i := range got {
					got[i], want[i] = 7, 7 // every value must be written
				}
				packB(got, w, nr, 2, cols, 5, 37)
				scalar(func() { packB(want, w, nr, 2, cols, 5, 37) })
				require.Equal(t, want, got, "packB nr=%d cols=%d %s", nr, cols, dtypeName(bf16))
			}
		}
	}
}
