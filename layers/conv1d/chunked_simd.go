//go:build goexperiment.simd && amd64

package conv1d

import (
	"simd/archsimd"
	"unsafe"
)

// On AVX-512 machines the row kernels work on 16 channels per instruction.
// Every vector constant is built here, behind the CPU check: building one
// executes AVX-512 instructions.
func init() {
	if archsimd.X86.AVX512() {
		ec = newExpConsts()
		tapPick, halves = newTapPerms()
		convRow4 = convRow4AVX512
		convRowK = convRowKAVX512
		convRows4x4 = convRows4x4AVX512
		transposeTaps = transposeTapsAVX512
	}
}

// Permutations for transposeTapsAVX512: tapPick[j] gathers tap j of the
// eight channels held by two concatenated vectors (lanes 0..7; lanes 8..15
// repeat them and are discarded); halves joins lanes 0..7 of two vectors.
var (
	tapPick [4]archsimd.Uint32x16
	halves  archsimd.Uint32x16
)

func newTapPerms() (p [4]archsimd.Uint32x16, h archsimd.Uint32x16) {
	var idx [16]uint32
	for j := range p {
		for i := range idx {
			idx[i] = uint32(4*(i%8) + j)
		}
		p[j] = archsimd.LoadUint32x16(&idx)
	}
	for i := range idx {
		idx[i] = uint32(i%8 + 16*(i/8))
	}
	return p, archsimd.LoadUint32x16(&idx)
}

// transposeTapsAVX512 is transposeTapsScalar with a K = 4 fast path that
// transposes 16 channels with 12 permutes instead of 64 scalar moves: it
// matters for decode, where T = 1 and the transpose is half the work.
func transposeTapsAVX512(wt, w []float32, k, n int) {
	if k != 4 {
		transposeTapsScalar(wt, w, k, n)
		return
	}
	full := n &^ 15
	for i := 0; i < full; i += 16 {
		a := w[4*i : 4*i+64]
		a0 := archsimd.LoadFloat32x16Slice(a[0:16])
		a1 := archsimd.LoadFloat32x16Slice(a[16:32])
		a2 := archsimd.LoadFloat32x16Slice(a[32:48])
		a3 := archsimd.LoadFloat32x16Slice(a[48:64])
		for j := range 4 {
			lo := a0.ConcatPermute(a1, tapPick[j])
			hi := a2.ConcatPermute(a3, tapPick[j])
			lo.ConcatPermute(hi, halves).StoreSlice(wt[j*n+i : j*n+i+16])
		}
	}
	for i := full; i < n; i++ {
		for j := range 4 {
			wt[j*n+i] = w[4*i+j]
		}
	}
}

type vec = archsimd.Float32x16

func splat(f float32) vec { return archsimd.BroadcastFloat32x16(f) }

// ld loads the 16 floats at p[i:]. The caller has checked the bounds: the
// inner loops index raw pointers because slice bounds checks and the
// spilled slice headers cost more than the arithmetic (measured 3×).
func ld(p unsafe.Pointer, i int) vec {
	return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(p, i*4)))
}

func st(v vec, p unsafe.Pointer, i int) { v.Store((*[16]float32)(unsafe.Add(p, i*4))) }

func ptr(s []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

// convRow4AVX512 is convRow4Scalar with 16 channels per step; the sum is
// w0·r0 then fused multiply-adds of w1·r1, w2·r2, w3·r3, Naive's order.
func convRow4AVX512(y, r0, r1, r2, r3, w0, w1, w2, w3 []float32) {
	n := len(y)
	for _, s := range [...][]float32{r0, r1, r2, r3, w0, w1, w2, w3} {
		if len(s) < n {
			panic("conv1d: short row") // unreachable: convRows slices them all to n
		}
	}
	full := n &^ 15
	row4(full, ptr(y), ptr(r0), ptr(r1), ptr(r2), ptr(r3), ptr(w0), ptr(w1), ptr(w2), ptr(w3))
	if full < n {
		// The ragged tail (< 16 channels) goes through the scalar kernel:
		// archsimd's partial loads trip checkptr under -race.
		convRow4Scalar(y[full:n], r0[full:n], r1[full:n], r2[full:n], r3[full:n], w0[full:n], w1[full:n], w2[full:n], w3[full:n])
	}
}

// row4 is the K = 4 inner loop over n channels (a multiple of 16).
func row4(n int, y, r0, r1, r2, r3, w0, w1, w2, w3 unsafe.Pointer) {
	for i := 0; i < n; i += 16 {
		u := ld(w0, i).Mul(ld(r0, i))
		u = ld(w1, i).MulAdd(ld(r1, i), u)
		u = ld(w2, i).MulAdd(ld(r2, i), u)
		u = ld(w3, i).MulAdd(ld(r3, i), u)
		st(ec.silu(u), y, i)
	}
}

// convRows4x4AVX512 computes four consecutive output rows, y [4][c], from
// the seven input rows x [7][c] they read (K = 4; x row m is time t0−3+m).
// Each input vector is loaded once and feeds every output that uses it, and
// the four tap vectors are loaded once per four outputs: an eighth of the
// L1/L2 loads of four convRow4 calls. Each output is still summed in
// Naive's order, w0·m0 first.
func convRows4x4AVX512(y, x []float32, c int, wt []float32) {
	if len(y) < 4*c || len(x) < 7*c || len(wt) < 4*c {
		panic("conv1d: short rows") // unreachable: convRows slices them
	}
	full := c &^ 15
	rows4x4(full, c, ptr(y), ptr(x), ptr(wt))
	for i := full; i < c; i++ { // ragged tail, scalar
		for o := range 4 {
			y[o*c+i] = siluFast(wt[i]*x[o*c+i] + wt[c+i]*x[(o+1)*c+i] + wt[2*c+i]*x[(o+2)*c+i] + wt[3*c+i]*x[(o+3)*c+i])
		}
	}
}

// rows4x4 is the inner loop of convRows4x4AVX512 over n channels (a
// multiple of 16); rows are c floats apart in y, x and the taps.
func rows4x4(n, c int, y, x, w unsafe.Pointer) {
	for i := 0; i < n; i += 16 {
		w0, w1, w2, w3 := ld(w, i), ld(w, c+i), ld(w, 2*c+i), ld(w, 3*c+i)
		m := ld(x, i)
		a0 := w0.Mul(m)
		m = ld(x, c+i)
		a0 = w1.MulAdd(m, a0)
		a1 := w0.Mul(m)
		m = ld(x, 2*c+i)
		a0 = w2.MulAdd(m, a0)
		a1 = w1.MulAdd(m, a1)
		a2 := w0.Mul(m)
		m = ld(x, 3*c+i)
		a0 = w3.MulAdd(m, a0)
		a1 = w2.MulAdd(m, a1)
		a2 = w1.MulAdd(m, a2)
		a3 := w0.Mul(m)
		st(ec.silu(a0), y, i)
		m = ld(x, 4*c+i)
		a1 = w3.MulAdd(m, a1)
		a2 = w2.MulAdd(m, a2)
		a3 = w1.MulAdd(m, a3)
		st(ec.silu(a1), y, c+i)
		m = ld(x, 5*c+i)
		a2 = w3.MulAdd(m, a2)
		a3 = w2.MulAdd(m, a3)
		st(ec.silu(a2), y, 2*c+i)
		a3 = w3.MulAdd(ld(x, 6*c+i), a3)
		st(ec.silu(a3), y, 3*c+i)
	}
}

// convRowKAVX512 is convRowKScalar with 16 channels per step (and the
// scalar kernel for a ragged tail).
func convRowKAVX512(y []float32, rows [][]float32, wt []float32, ws int) {
	n := len(y)
	for _, r := range rows {
		if len(r) < n {
			panic("conv1d: short row") // unreachable: convRows slices them all to n
		}
	}
	if len(wt) < (len(rows)-1)*ws+n {
		panic("conv1d: short taps") // unreachable, as above
	}
	full := n &^ 15
	py, pw := ptr(y), ptr(wt)
	for i := 0; i < full; i += 16 {
		u := ld(pw, i).Mul(ld(ptr(rows[0]), i))
		for j := 1; j < len(rows); j++ {
			u = ld(pw, j*ws+i).MulAdd(ld(ptr(rows[j]), i), u)
		}
		st(ec.silu(u), py, i)
	}
	convRowKScalar(y[full:n], trimRows(rows, full), wt[full:], ws)
}

// trimRows returns the rows with their first n values dropped, reusing a
// small array for the usual K ≤ 8.
func trimRows(rows [][]float32, n int) [][]float32 {
	var small [8][]float32
	out := small[:0]
	for _, r := range rows {
		out = append(out, r[n:])
	}
	return out
}

// ec holds the broadcast constants of the vector exp, built once so the
// loops read them as memory operands instead of rebuilding them per step
// (Go does not hoist the broadcasts by itself).
var ec *expConsts

// expConsts are the exp and SiLU constants, one per lane.
type expConsts struct {
	lo, hi, log2e, negLn2Hi, negLn2Lo vec
	coef                              [7]vec
	one, zero                         vec
}

func newExpConsts() *expConsts {
	ec := &expConsts{lo: splat(-104), hi: splat(expHi), log2e: splat(log2e),
		negLn2Hi: splat(-ln2Hi), negLn2Lo: splat(-ln2Lo), one: splat(1), zero: splat(0)}
	for i, c := range expCoef {
		ec.coef[i] = splat(c)
	}
	return ec
}

// exp is expFast on 16 lanes. VSCALEFPS applies 2^n, so below expLo the
// result underflows gracefully (to 0 by x = −104) instead of needing a mask.
func (ec *expConsts) exp(x vec) vec {
	x = x.Max(ec.lo).Min(ec.hi)
	n := x.Mul(ec.log2e).RoundToEvenScaled(0)
	r := n.MulAdd(ec.negLn2Hi, x)
	r = n.MulAdd(ec.negLn2Lo, r)
	p := ec.coef[0].MulAdd(r, ec.coef[1])
	p = p.MulAdd(r, ec.coef[2])
	p = p.MulAdd(r, ec.coef[3])
	p = p.MulAdd(r, ec.coef[4])
	p = p.MulAdd(r, ec.coef[5])
	p = p.MulAdd(r, ec.coef[6])
	p = p.MulAdd(r, ec.one)
	return p.Scale(n)
}

// silu is siluFast on 16 lanes: u / (1 + e^−u).
func (ec *expConsts) silu(u vec) vec {
	// A true divide: VRCP14PS plus a Newton step measured 20% slower.
	return u.Div(ec.one.Add(ec.exp(ec.zero.Sub(u))))
}
