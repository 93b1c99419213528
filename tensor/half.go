package tensor

import "math"

// BF16ToFloat32 widens a bfloat16 bit pattern: bf16 is the top half of an
// IEEE float32, so the widening is exact.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 rounds to the nearest bfloat16, ties to even, as torch does.
// NaN stays NaN (quiet).
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToFloat32 widens an IEEE binary16 bit pattern (exact, subnormals too).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value = man · 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// Float32ToF16 rounds f to the nearest IEEE binary16 value, ties to even,
// and returns its bit pattern: subnormals kept, overflow to ±Inf (as a
// cast does), NaN stays NaN.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	x := math.Abs(float64(f))
	switch {
	case math.IsNaN(x):
		return sign | 0x7e00
	case x >= 65520: // halfway between 65504 and the next binade rounds up
		return sign | 0x7c00
	case x == 0:
		return sign
	}
	_, e := math.Frexp(x) // x = frac·2^e, frac in [0.5, 1)
	e = max(e-1, -14)     // subnormals share the spacing 2^-24
	q := math.Ldexp(1, e-10)
	m := math.RoundToEven(x / q) // significand in units of q: ≤ 2048
	if x < 1.0/(1<<14) {         // subnormal (or rounds up to the smallest normal)
		return sign | uint16(m)
	}
	if m == 2048 { // rounded up into the next binade
		m, e = 1024, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(m-1024)
}
