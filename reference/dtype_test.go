package reference

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// RoundF16 agrees with the exact binary16 grid: every f16 value is kept,
// a midpoint goes to the even neighbour, overflow goes to Inf.
func TestRoundF16(t *testing.T) {
	for h := uint16(0); h < 0x7c00; h += 7 {
		v := tensor.F16ToFloat32(h)
		require.Equal(t, v, RoundF16(v), "f16 %#04x", h)
		require.Equal(t, -v, RoundF16(-v))
	}
	assert.Equal(t, float32(1), RoundF16(1+1.0/4096), "a midpoint below goes to even")
	assert.Equal(t, float32(1+2.0/1024), RoundF16(1+3.0/2048), "a midpoint above goes to even")
	assert.Equal(t, float32(65504), RoundF16(65519))
	assert.True(t, math.IsInf(float64(RoundF16(70000)), 1))
	assert.Equal(t, float32(math.Ldexp(1, -24)), RoundF16(float32(math.Ldexp(1.2, -24))), "subnormal")
}

func TestRoundTo(t *testing.T) {
	x := []float32{1.00390625 + 1e-4, 3.14159}
	require.NoError(t, RoundTo("bf16", x))
	assert.Equal(t, []float32{1.0078125, 3.140625}, x)
	assert.Error(t, RoundTo("f8", x))
}
