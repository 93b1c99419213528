package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Every binary16 value survives the round trip bit for bit (NaNs stay NaN).
func TestF16RoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		got := Float32ToF16(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(F16ToFloat32(got))) {
				t.Fatalf("NaN %#04x came back as %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("%#04x (%g) came back as %#04x", h, f, got)
		}
	}
}

// Random float32 values round to the nearest binary16 value, ties to even:
// no representable value lies closer than the one chosen.
func TestF16RoundsToNearest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		f := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-24)))
		h := Float32ToF16(f)
		g := float64(F16ToFloat32(h))
		if math.IsInf(g, 0) {
			if math.Abs(float64(f)) < 65520 {
				t.Fatalf("%g overflowed", f)
			}
			continue
		}
		for _, n := range []uint16{h - 1, h + 1} {
			if o := float64(F16ToFloat32(n)); !math.IsNaN(o) && !math.IsInf(o, 0) && math.Abs(o-float64(f)) < math.Abs(g-float64(f)) {
				t.Fatalf("%g rounded to %g, but %g is closer", f, g, o)
			}
		}
	}
}
