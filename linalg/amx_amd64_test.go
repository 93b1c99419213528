package linalg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// TestPackAAMX: the AVX-512 rounding of x's rows (amxPackRow) gives
// tensor.Float32ToBF16's bits for every kind of float32, NaNs, infinities,
// subnormals and exact ties included, and the block is laid out as the A
// tiles load it, zero past the rows and the K slice.
func TestPackAAMX(t *testing.T) {
	if cpu.Selected() != cpu.AVX512 {
		t.Skip("amxPackRow is AVX-512 code")
	}
	r := rand.New(rand.NewPCG(47, 48))
	const ldx = 200
	x := make([]float32, 40*ldx)
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001),
		math.Float32frombits(0x00000001), math.Float32frombits(0x807fffff), math.MaxFloat32, -math.MaxFloat32,
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x3f808001),
		math.Float32frombits(0x7f7f8000), math.Float32frombits(0xff7fffff)}
	for i := range x {
		x[i] = math.Float32frombits(r.Uint32())
		if i%7 == 0 {
			x[i] = special[i/7%len(special)]
		}
	}
	for _, c := range [][4]int{{0, 32, 0, 64}, {3, 32, 5, 100}, {1, 7, 0, 32}, {2, 32, 9, 31}, {0, 1, 0, 129}} {
		i0, rows, k0, kb := c[0], c[1], c[2], c[3]
		ks := ceilDiv(kb, amxK)
		got := make([]uint16, ks*amxStep)
		for i := range got {
			got[i] = 0xdead // every value must be written
		}
		packAAMX(got, x, ldx, i0, rows, k0, kb)
		want := make([]uint16, ks*amxStep)
		for i := 0; i < rows; i++ {
			for q := 0; q < kb; q++ {
				want[q/amxK*amxStep+i*amxK+q%amxK] = tensor.Float32ToBF16(x[(i0+i)*ldx+k0+q])
			}
		}
		require.Equal(t, want, got, "i0=%d rows=%d k0=%d kb=%d", i0, rows, k0, kb)
	}
}
