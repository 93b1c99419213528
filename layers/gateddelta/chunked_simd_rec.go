//go:build goexperiment.simd

package gateddelta

import (
	"simd/archsimd"
	"unsafe"
)

// AVX-512 column-block kernels of the fused recurrence (chunked_recurrent.go).
// A block is 32 (or 16) state columns: two (one) vectors per state row,
// with δ′, o and y held in registers across the d_k rows. The sweeps are
// written like tile4x32: raw pointers that advance only while another row
// follows, no helper calls inside the loops.

// recBlockWidth picks the next column block width for rem columns left.
func recBlockWidth(rem int) int {
	if simdEnabled {
		if rem >= 32 {
			return 32
		}
		if rem >= 16 {
			return 16
		}
	}
	return min(rem, 32)
}

// recBlock runs all n tokens over one column block (see recBlockGeneric).
func recBlock(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	if !simdEnabled || (w != 32 && w != 16) {
		recBlockGeneric(s, lds, w, dk, q, k, ldqk, v, out, ldv, sc, n)
		return
	}
	_ = s[(dk-1)*lds+w-1]
	_ = q[(n-1)*ldqk+dk-1]
	_ = k[(n-1)*ldqk+dk-1]
	_ = v[(n-1)*ldv+w-1]
	_ = out[(n-1)*ldv+w-1]
	_, _, _, _ = sc.yScale[n-1], sc.betaD[n-1], sc.rho[n-1], sc.oScale[n-1]
	if w == 32 {
		recBlock32(&s[0], lds, dk, q, k, ldqk, v, out, ldv, sc, n)
	} else {
		recBlock16(&s[0], lds, dk, q, k, ldqk, v, out, ldv, sc, n)
	}
}

func recBlock32(s *float32, lds, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	ps, ls := unsafe.Pointer(s), uintptr(4*lds)
	y0, y1 := yPass32(ps, ls, dk, unsafe.Pointer(&k[0]))
	for t := 0; t < n; t++ {
		// δ′ = (v − c′y)·β/c
		vt := (*[32]float32)(v[t*ldv:])
		ys, bd := splat(-sc.yScale[t]), splat(sc.betaD[t])
		d0 := y0.MulAdd(ys, archsimd.LoadFloat32x16((*[16]float32)(vt[:16]))).Mul(bd)
		d1 := y1.MulAdd(ys, archsimd.LoadFloat32x16((*[16]float32)(vt[16:]))).Mul(bd)
		kt, qt := unsafe.Pointer(&k[t*ldqk]), unsafe.Pointer(&q[t*ldqk])
		var o0, o1 vec
		switch rho := sc.rho[t]; {
		case t+1 == n:
			o0, o1 = pass32Last(ps, ls, dk, rho, kt, qt, d0, d1)
		case rho == 1:
			o0, o1, y0, y1 = pass32(ps, ls, dk, kt, qt, unsafe.Pointer(&k[(t+1)*ldqk]), d0, d1)
		default:
			o0, o1, y0, y1 = pass32Rho(ps, ls, dk, rho, kt, qt, unsafe.Pointer(&k[(t+1)*ldqk]), d0, d1)
		}
		os := splat(sc.oScale[t])
		ot := (*[32]float32)(out[t*ldv:])
		o0.Mul(os).Store((*[16]float32)(ot[:16]))
		o1.Mul(os).Store((*[16]float32)(ot[16:]))
	}
}

// yPass32 returns S̃ᵀk̂ for the block, with two partial sums per vector to
// hide the FMA latency.
//
//go:noinline
func yPass32(s unsafe.Pointer, ls uintptr, dk int, k unsafe.Pointer) (vec, vec) {
	var a0, a1, b0, b1 vec
	for i := 0; i < dk; i++ {
		x := archsimd.BroadcastFloat32x16(*(*float32)(k))
		if i&1 == 0 {
			a0 = archsimd.LoadFloat32x16((*[16]float32)(s)).MulAdd(x, a0)
			a1 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(s, 64))).MulAdd(x, a1)
		} else {
			b0 = archsimd.LoadFloat32x16((*[16]float32)(s)).MulAdd(x, b0)
			b1 = archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(s, 64))).MulAdd(x, b1)
		}
		if i+1 < dk {
			s, k = unsafe.Add(s, ls), unsafe.Add(k, 4)
		}
	}
	return a0.Add(b0), a1.Add(b1)
}

// pass32 is one token's single sweep: S̃ += k̂ δ′ᵀ, o = S̃ᵀ q̂, y = S̃ᵀ k̂ₙ
// (k̂ₙ the next token's key).
//
//go:noinline
func pass32(s unsafe.Pointer, ls uintptr, dk int, k, q, kn unsafe.Pointer, d0, d1 vec) (o0, o1, y0, y1 vec) {
	for i := 0; i < dk; i++ {
		s1p := unsafe.Add(s, 64)
		x := archsimd.BroadcastFloat32x16(*(*float32)(k))
		s0 := d0.MulAdd(x, archsimd.LoadFloat32x16((*[16]float32)(s)))
		s1 := d1.MulAdd(x, archsimd.LoadFloat32x16((*[16]float32)(s1p)))
		s0.Store((*[16]float32)(s))
		s1.Store((*[16]float32)(s1p))
		x = archsimd.BroadcastFloat32x16(*(*float32)(q))
		o0 = s0.MulAdd(x, o0)
		o1 = s1.MulAdd(x, o1)
		x = archsimd.BroadcastFloat32x16(*(*float32)(kn))
		y0 = s0.MulAdd(x, y0)
		y1 = s1.MulAdd(x, y1)
		if i+1 < dk {
			s, k, q, kn = unsafe.Add(s, ls), unsafe.Add(k, 4), unsafe.Add(q, 4), unsafe.Add(kn, 4)
		}
	}
	return
}

// pass32Rho is pass32 with a rebase folded in: S̃ ← ρS̃ + k̂ δ′ᵀ.
//
//go:noinline
func pass32Rho(s unsafe.Pointer, ls uintptr, dk int, rho float32, k, q, kn unsafe.Pointer, d0, d1 vec) (o0, o1, y0, y1 vec) {
	rv := splat(rho)
	for i := 0; i < dk; i++ {
		s1p := unsafe.Add(s, 64)
		x := archsimd.BroadcastFloat32x16(*(*float32)(k))
		s0 := d0.MulAdd(x, archsimd.LoadFloat32x16((*[16]float32)(s)).Mul(rv))
		s1 := d1.MulAdd(x, archsimd.LoadFloat32x16((*[16]float32)(s1p)).Mul(rv))
		s0.Store((*[16]float32)(s))
		s1.Store((*[16]float32)(s1p))
		x = archsimd.BroadcastFloat32x16(*(*float32)(q))
		o0 = s0.MulAdd(x, o0)
		o1 = s1.MulAdd(x, o1)
		x = archsimd.BroadcastFloat32x16(*(*float32)(kn))
		y0 = s0.MulAdd(x, y0)
		y1 = s1.MulAdd(x, y1)
		if i+1 < dk {
			s, k, q, kn = unsafe.Add(s, ls), unsafe.Add(k, 4), unsafe.Add(q, 4), unsafe.Add(kn, 4)
		}
	}
	return
}

// pass32Last is the sweep for a window's last token, whose successor's y
// the next window's prologue computes: S̃ ← ρS̃ + k̂ δ′ᵀ, o = S̃ᵀ q̂. On
// the sequence's last token ρ folds the running scale back in, so the
// stored state is S.
//
//go:noinline
func pass32Last(s unsafe.Pointer, ls uintptr, dk int, rho float32, k, q unsafe.Pointer, d0, d1 vec) (o0, o1 vec) {
	rv := splat(rho)
	for i := 0; i < dk; i++ {
		s1p := unsafe.Add(s, 64)
		x := archsimd.BroadcastFloat32x16(*(*float32)(k))
		s0 := d0.MulAdd(x, archsimd.LoadFloat32x16((*[16]float32)(s)).Mul(rv))
		s1 := d1.MulAdd(x, archsimd.LoadFloat32x16((*[16]float32)(s1p)).Mul(rv))
		s0.Store((*[16]float32)(s))
		s1.Store((*[16]float32)(s1p))
		x = archsimd.BroadcastFloat32x16(*(*float32)(q))
		o0 = s0.MulAdd(x, o0)
		o1 = s1.MulAdd(x, o1)
		if i+1 < dk {
			s, k, q = unsafe.Add(s, ls), unsafe.Add(k, 4), unsafe.Add(q, 4)
		}
	}
	return
}

func recBlock16(s *float32, lds, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	ps, ls := unsafe.Pointer(s), uintptr(4*lds)
	y := yPass16(ps, ls, dk, unsafe.Pointer(&k[0]))
	for t := 0; t < n; t++ {
		ys, bd := splat(-sc.yScale[t]), splat(sc.betaD[t])
		d := y.MulAdd(ys, archsimd.LoadFloat32x16((*[16]float32)(v[t*ldv:]))).Mul(bd)
		kt, qt := unsafe.Pointer(&k[t*ldqk]), unsafe.Pointer(&q[t*ldqk])
		var o vec
		if t+1 == n {
			o = pass16Last(ps, ls, dk, sc.rho[t], kt, qt, d)
		} else {
			o, y = pass16(ps, ls, dk, sc.rho[t], kt, qt, unsafe.Pointer(&k[(t+1)*ldqk]), d)
		}
		o.Mul(splat(sc.oScale[t])).Store((*[16]float32)(out[t*ldv:]))
	}
}

//go:noinline
func yPass16(s unsafe.Pointer, ls uintptr, dk int, k unsafe.Pointer) vec {
	var a, b vec
	for i := 0; i < dk; i++ {
		x := archsimd.BroadcastFloat32x16(*(*float32)(k))
		if i&1 == 0 {
			a = archsimd.LoadFloat32x16((*[16]float32)(s)).MulAdd(x, a)
		} else {
			b = archsimd.LoadFloat32x16((*[16]float32)(s)).MulAdd(x, b)
		}
		if i+1 < dk {
			s, k = unsafe.Add(s, ls), unsafe.Add(k, 4)
		}
	}
	return a.Add(b)
}

// pass16 is pass32Rho for one vector (only DV tails use it, so the
// multiply by ρ = 1 is not worth a separate loop).
//
//go:noinline
func pass16(s unsafe.Pointer, ls uintptr, dk int, rho float32, k, q, kn unsafe.Pointer, d vec) (o, y vec) {
	rv := splat(rho)
	for i := 0; i < dk; i++ {
		s0 := d.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(k)), archsimd.LoadFloat32x16((*[16]float32)(s)).Mul(rv))
		s0.Store((*[16]float32)(s))
		o = s0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(q)), o)
		y = s0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(kn)), y)
		if i+1 < dk {
			s, k, q, kn = unsafe.Add(s, ls), unsafe.Add(k, 4), unsafe.Add(q, 4), unsafe.Add(kn, 4)
		}
	}
	return
}

//go:noinline
func pass16Last(s unsafe.Pointer, ls uintptr, dk int, rho float32, k, q unsafe.Pointer, d vec) (o vec) {
	rv := splat(rho)
	for i := 0; i < dk; i++ {
		s0 := d.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(k)), archsimd.LoadFloat32x16((*[16]float32)(s)).Mul(rv))
		s0.Store((*[16]float32)(s))
		o = s0.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(q)), o)
		if i+1 < dk {
			s, k, q = unsafe.Add(s, ls), unsafe.Add(k, 4), unsafe.Add(q, 4)
		}
	}
	return
}
