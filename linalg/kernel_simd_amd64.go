//go:build goexperiment.simd

package linalg

import "simd/archsimd"

// The archsimd kernels need AVX2 and FMA only. The small-M kernel is memory
// bound (one FMA per weight vector and x row), so 8-wide vectors already
// outrun DRAM and it serves AVX-512 machines too. The 6×16 GEMM kernel is
// the fallback for CPUs without AVX-512, where the assembly kernel cannot run.
func init() {
	if !archsimd.X86.AVX2() || !archsimd.X86.FMA() {
		return
	}
	registerGemm(avx2Gemm)
	registerGemv(&gemvKernel{name: "archsimd8", prio: 10, maxM: 2, f32: simdGemvF32, bf16: simdGemvBF16})
}

// avx2Gemm holds 12 accumulators, two B vectors and one broadcast: all 15
// vector registers archsimd allocates on amd64.
var avx2Gemm = &gemmKernel{name: "archsimd6x16", mr: 6, nr: 16, prio: 10, tile: simdTile6x16}

func simdTile6x16(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	var t [6][16]float32
	if rows == 6 {
		var c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51 archsimd.Float32x8
		a, b = a[:6*kc], b[:16*kc]
		for len(a) >= 6 && len(b) >= 16 {
			b0 := archsimd.LoadFloat32x8((*[8]float32)(b[0:8]))
			b1 := archsimd.LoadFloat32x8((*[8]float32)(b[8:16]))
			v := archsimd.BroadcastFloat32x8(a[0])
			c00 = b0.MulAdd(v, c00)
			c01 = b1.MulAdd(v, c01)
			v = archsimd.BroadcastFloat32x8(a[1])
			c10 = b0.MulAdd(v, c10)
			c11 = b1.MulAdd(v, c11)
			v = archsimd.BroadcastFloat32x8(a[2])
			c20 = b0.MulAdd(v, c20)
			c21 = b1.MulAdd(v, c21)
			v = archsimd.BroadcastFloat32x8(a[3])
			c30 = b0.MulAdd(v, c30)
			c31 = b1.MulAdd(v, c31)
			v = archsimd.BroadcastFloat32x8(a[4])
			c40 = b0.MulAdd(v, c40)
			c41 = b1.MulAdd(v, c41)
			v = archsimd.BroadcastFloat32x8(a[5])
			c50 = b0.MulAdd(v, c50)
			c51 = b1.MulAdd(v, c51)
			a, b = a[6:], b[16:]
		}
		if cols == 16 {
			// Full tile: add and store straight into C.
			for i, cv := range [6][2]archsimd.Float32x8{{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}} {
				row := c[i*ldc : i*ldc+16]
				lo, hi := cv[0], cv[1]
				if acc {
					lo = lo.Add(archsimd.LoadFloat32x8Slice(row[0:8]))
					hi = hi.Add(archsimd.LoadFloat32x8Slice(row[8:16]))
				}
				lo.StoreSlice(row[0:8])
				hi.StoreSlice(row[8:16])
			}
			return
		}
		for i, cv := range [6][2]archsimd.Float32x8{{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}} {
			cv[0].StoreSlice(t[i][0:8])
			cv[1].StoreSlice(t[i][8:16])
		}
	} else {
		// Ragged bottom edge: one row at a time, two accumulators.
		for i := 0; i < rows; i++ {
			var lo, hi archsimd.Float32x8
			for k := 0; k < kc; k++ {
				v := archsimd.BroadcastFloat32x8(a[k*rows+i])
				lo = archsimd.LoadFloat32x8Slice(b[16*k:]).MulAdd(v, lo)
				hi = archsimd.LoadFloat32x8Slice(b[16*k+8:]).MulAdd(v, hi)
			}
			lo.StoreSlice(t[i][0:8])
			hi.StoreSlice(t[i][8:16])
		}
	}
	for i := 0; i < rows; i++ {
		ci := c[i*ldc : i*ldc+cols]
		for j := range ci {
			if acc {
				ci[j] += t[i][j]
			} else {
				ci[j] = t[i][j]
			}
		}
	}
}

// simdGemvF32 dots eight weight rows at a time with each x row. Eight rows
// are eight concurrent DRAM streams, which one core needs to approach its
// share of the bandwidth (four measured 25% slower); the rows (8·k floats)
// stay in L2 while the x rows pass, so W is read from memory once for any m.
func simdGemvF32(y []float32, ldy int, x []float32, m, k int, w []float32) {
	rows := len(w) / k
	r := 0
	for ; r+8 <= rows; r += 8 {
		for i := 0; i < m; i++ {
			xi := x[i*k : (i+1)*k]
			n := len(xi)
			w0, w1, w2, w3 := w[r*k:][:n], w[(r+1)*k:][:n], w[(r+2)*k:][:n], w[(r+3)*k:][:n]
			w4, w5, w6, w7 := w[(r+4)*k:][:n], w[(r+5)*k:][:n], w[(r+6)*k:][:n], w[(r+7)*k:][:n]
			var a0, a1, a2, a3, a4, a5, a6, a7 archsimd.Float32x8
			j := 0
			for ; j+8 <= n; j += 8 {
				xv := archsimd.LoadFloat32x8((*[8]float32)(xi[j : j+8]))
				a0 = archsimd.LoadFloat32x8((*[8]float32)(w0[j:j+8])).MulAdd(xv, a0)
				a1 = archsimd.LoadFloat32x8((*[8]float32)(w1[j:j+8])).MulAdd(xv, a1)
				a2 = archsimd.LoadFloat32x8((*[8]float32)(w2[j:j+8])).MulAdd(xv, a2)
				a3 = archsimd.LoadFloat32x8((*[8]float32)(w3[j:j+8])).MulAdd(xv, a3)
				a4 = archsimd.LoadFloat32x8((*[8]float32)(w4[j:j+8])).MulAdd(xv, a4)
				a5 = archsimd.LoadFloat32x8((*[8]float32)(w5[j:j+8])).MulAdd(xv, a5)
				a6 = archsimd.LoadFloat32x8((*[8]float32)(w6[j:j+8])).MulAdd(xv, a6)
				a7 = archsimd.LoadFloat32x8((*[8]float32)(w7[j:j+8])).MulAdd(xv, a7)
			}
			if j < n {
				xv := loadTailF32(xi[j:])
				a0 = loadTailF32(w0[j:]).MulAdd(xv, a0)
				a1 = loadTailF32(w1[j:]).MulAdd(xv, a1)
				a2 = loadTailF32(w2[j:]).MulAdd(xv, a2)
				a3 = loadTailF32(w3[j:]).MulAdd(xv, a3)
				a4 = loadTailF32(w4[j:]).MulAdd(xv, a4)
				a5 = loadTailF32(w5[j:]).MulAdd(xv, a5)
				a6 = loadTailF32(w6[j:]).MulAdd(xv, a6)
				a7 = loadTailF32(w7[j:]).MulAdd(xv, a7)
			}
			yi := y[i*ldy+r : i*ldy+r+8]
			yi[0], yi[1], yi[2], yi[3] = hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)
			yi[4], yi[5], yi[6], yi[7] = hsum8(a4), hsum8(a5), hsum8(a6), hsum8(a7)
		}
	}
	for ; r < rows; r++ {
		wr := w[r*k : (r+1)*k]
		for i := 0; i < m; i++ {
			y[i*ldy+r] = simdDot(x[i*k:(i+1)*k], wr)
		}
	}
}

// simdGemvBF16 is simdGemvF32 for bf16 weights: each 8-value load is
// zero-extended to 32 bits and shifted into the high half, which is the
// exact float32 value.
func simdGemvBF16(y []float32, ldy int, x []float32, m, k int, w []uint16) {
	rows := len(w) / k
	r := 0
	for ; r+8 <= rows; r += 8 {
		for i := 0; i < m; i++ {
			xi := x[i*k : (i+1)*k]
			n := len(xi)
			w0, w1, w2, w3 := w[r*k:][:n], w[(r+1)*k:][:n], w[(r+2)*k:][:n], w[(r+3)*k:][:n]
			w4, w5, w6, w7 := w[(r+4)*k:][:n], w[(r+5)*k:][:n], w[(r+6)*k:][:n], w[(r+7)*k:][:n]
			var a0, a1, a2, a3, a4, a5, a6, a7 archsimd.Float32x8
			j := 0
			for ; j+8 <= n; j += 8 {
				xv := archsimd.LoadFloat32x8((*[8]float32)(xi[j : j+8]))
				a0 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w0[j:j+8]))).MulAdd(xv, a0)
				a1 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w1[j:j+8]))).MulAdd(xv, a1)
				a2 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w2[j:j+8]))).MulAdd(xv, a2)
				a3 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w3[j:j+8]))).MulAdd(xv, a3)
				a4 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w4[j:j+8]))).MulAdd(xv, a4)
				a5 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w5[j:j+8]))).MulAdd(xv, a5)
				a6 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w6[j:j+8]))).MulAdd(xv, a6)
				a7 = widen8(archsimd.LoadUint16x8((*[8]uint16)(w7[j:j+8]))).MulAdd(xv, a7)
			}
			if j < n {
				xv := loadTailF32(xi[j:])
				a0 = widen8(loadTailU16(w0[j:])).MulAdd(xv, a0)
				a1 = widen8(loadTailU16(w1[j:])).MulAdd(xv, a1)
				a2 = widen8(loadTailU16(w2[j:])).MulAdd(xv, a2)
				a3 = widen8(loadTailU16(w3[j:])).MulAdd(xv, a3)
				a4 = widen8(loadTailU16(w4[j:])).MulAdd(xv, a4)
				a5 = widen8(loadTailU16(w5[j:])).MulAdd(xv, a5)
				a6 = widen8(loadTailU16(w6[j:])).MulAdd(xv, a6)
				a7 = widen8(loadTailU16(w7[j:])).MulAdd(xv, a7)
			}
			yi := y[i*ldy+r : i*ldy+r+8]
			yi[0], yi[1], yi[2], yi[3] = hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3)
			yi[4], yi[5], yi[6], yi[7] = hsum8(a4), hsum8(a5), hsum8(a6), hsum8(a7)
		}
	}
	for ; r < rows; r++ {
		wr := w[r*k : (r+1)*k]
		for i := 0; i < m; i++ {
			xi := x[i*k : (i+1)*k]
			var a0 archsimd.Float32x8
			j := 0
			for ; j+8 <= k; j += 8 {
				a0 = widen8(archsimd.LoadUint16x8Slice(wr[j:])).MulAdd(archsimd.LoadFloat32x8Slice(xi[j:]), a0)
			}
			if j < k {
				a0 = widen8(loadTailU16(wr[j:])).MulAdd(loadTailF32(xi[j:]), a0)
			}
			y[i*ldy+r] = hsum8(a0)
		}
	}
}

// widen8 turns eight bf16 bit patterns into their float32 values.
func widen8(v archsimd.Uint16x8) archsimd.Float32x8 {
	return v.ExtendToUint32().ShiftAllLeft(16).AsFloat32x8()
}

func simdDot(a, b []float32) float32 {
	b = b[:len(a)]
	var s archsimd.Float32x8
	j := 0
	for ; j+8 <= len(a); j += 8 {
		s = archsimd.LoadFloat32x8Slice(a[j:]).MulAdd(archsimd.LoadFloat32x8Slice(b[j:]), s)
	}
	if j < len(a) {
		s = loadTailF32(a[j:]).MulAdd(loadTailF32(b[j:]), s)
	}
	return hsum8(s)
}

func hsum8(v archsimd.Float32x8) float32 {
	s := v.GetLo().Add(v.GetHi())
	s = s.AddPairs(s)
	s = s.AddPairs(s)
	return s.GetElem(0)
}

// loadTailF32 loads the last 1…7 values of a row, zero-padded. It copies
// through a local array because archsimd's SlicePart loads convert the short
// slice to an 8-element array pointer, which checkptr (-race) rejects.
func loadTailF32(s []float32) archsimd.Float32x8 {
	var t [8]float32
	copy(t[:], s)
	return archsimd.LoadFloat32x8(&t)
}

// loadTailU16 is loadTailF32 for bf16 bit patterns.
func loadTailU16(s []uint16) archsimd.Uint16x8 {
	var t [8]uint16
	copy(t[:], s)
	return archsimd.LoadUint16x8(&t)
}
