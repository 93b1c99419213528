package linalg

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
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
	// The VDPBF16PS kernel runs exactly when internal/cpu allows it.
	assert.Equal(t, cpu.HasBF16(), bf16DotKernels[0] != goBF16Dot)
	info := KernelInfo()
	assert.Contains(t, info, "gemm "+want[0])
	assert.Contains(t, info, "gemv "+want[1])
	t.Logf("level %s: %s", cpu.Describe(), info)
}
