//go:build goexperiment.simd && amd64

package attention

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

// smallTileAVX512 is Chunked.runTile for at most eight rows, with the rows
// kept in row-major order: the decode case (one token, NH/NKV query heads)
// would fill only a few of sixteen lanes in the lane-per-row layout.
//
//   - QKᵀ as dot products over D (vectors along D, one horizontal sum per
//     score), written to P [key][8] (the row index fastest);
//   - the online softmax on P, two keys per 16-lane vector;
//   - PV as broadcast-P times value rows, into O [row][D].
//
// It needs D to be a multiple of 16 and reports false otherwise.
func smallTileAVX512(tl *tile, out, q, k, v []float32, d Dims, scale float32, g, t0, t1, bk int) bool {
	D := d.D
	group := d.NH / d.NKV
	rows := (t1 - t0) * group
	if D%16 != 0 || rows > smallRows {
		return false
	}
	// The tile buffers are sized for at least 16 lanes, which is enough.
	qs, o := tl.qt[:smallRows*D], tl.ot[:smallRows*D]
	p := tl.st[:(bk+1)*8]
	m, l, corr := tl.m[:16], tl.l[:16], tl.corr[:16]
	rowOff := tl.rowOff[:rows]

	for i := range rows {
		t, h := t0+i/group, g*group+i%group
		rowOff[i] = (t*d.NH + h) * D
		for j, x := range q[rowOff[i] : rowOff[i]+D] {
			qs[i*D+j] = x * scale
		}
	}
	clear(o[:rows*D])
	clear(p) // lanes ≥ rows stay 0: finite, never read back
	for i := range m {
		m[i], l[i] = float32(math.Inf(-1)), 0
	}

	off := d.S - d.T
	kvStride := d.NKV * D
	lastKey := off + t1 - 1
	vs := D + vPad
	for j0 := 0; j0 <= lastKey; j0 += bk {
		jn := min(bk, lastKey+1-j0)
		qkRows(rows, D, qs, k[(j0*d.NKV+g)*D:], kvStride, jn, p)
		jp := (jn + 1) &^ 1 // keys in pairs; a padding key gets −Inf
		for i := jn * 8; i < jp*8; i++ {
			p[i] = float32(math.Inf(-1))
		}
		if j0+jn-1 > off+t0 { // causal mask, as in Chunked.runTile
			for i := range rows {
				lim := off + t0 + i/group
				for jj := max(0, lim+1-j0); jj < jn; jj++ {
					p[jj*8+i] = float32(math.Inf(-1))
				}
			}
		}
		softmaxPairs(p[:jp*8], m, l, corr)

		// O[i] ← corr[i]·O[i], then O[i] += Σ_jj P[jj][i]·V[j0+jj].
		for i := range rows {
			if c := corr[i]; c != 1 {
				scaleRow(o[i*D:(i+1)*D], c)
			}
		}
		vb := tl.vb[:jn*vs]
		for jj := range jn {
			copy(vb[jj*vs:jj*vs+D], v[((j0+jj)*d.NKV+g)*D:])
		}
		if len(p) < jn*8 || len(vb) < (jn-1)*vs+D || len(o) < rows*D || len(tl.ones) < D {
			panic("attention: small tile bounds") // unreachable: sized above
		}
		gemmTiles(rows, jn, ptr(p), 1, 8, ptr(vb), vs, ptr(o), D, D, ptr(tl.ones), true)
	}
	for i := range rows {
		dst := out[rowOff[i] : rowOff[i]+D]
		copy(dst, o[i*D:(i+1)*D])
		scaleRow(dst, 1/l[i]) // l ≥ 1
	}
	return true
}

// qkRows sets p[jj·8+i] = qs[i·D:(i+1)·D] · kb[jj·ks:jj·ks+D] for i < rows
// and jj < jn, four rows per pass over each key row.
func qkRows(rows, D int, qs, kb []float32, ks, jn int, p []float32) {
	if D%16 != 0 || len(qs) < rows*D || len(kb) < (jn-1)*ks+D || len(p) < jn*8 {
		panic("attention: qkRows bounds") // unreachable: smallTileAVX512 checks
	}
	pq, pk, pp := ptr(qs), ptr(kb), ptr(p)
	for jj := range jn {
		kr := unsafe.Add(pk, jj*ks*4)
		i := 0
		for ; i+4 <= rows; i += 4 {
			s := dot4(D, unsafe.Add(pq, i*D*4), D, kr)
			s.Store((*[4]float32)(unsafe.Add(pp, (jj*8+i)*4)))
		}
		for ; i < rows; i++ {
			*(*float32)(unsafe.Add(pp, (jj*8+i)*4)) = dot1(D, unsafe.Add(pq, i*D*4), kr)
		}
	}
}

// dot4 returns the dot products of four q rows (ldq apart) with one k row,
// each of length D (a multiple of 16).
func dot4(D int, q unsafe.Pointer, ldq int, k unsafe.Pointer) archsimd.Float32x4 {
	var a0, a1, a2, a3 vec
	q1 := unsafe.Add(q, ldq*4)
	q2 := unsafe.Add(q1, ldq*4)
	q3 := unsafe.Add(q2, ldq*4)
	for i := 0; i < D; i += 16 {
		kv := ld(k, i)
		a0 = ld(q, i).MulAdd(kv, a0)
		a1 = ld(q1, i).MulAdd(kv, a1)
		a2 = ld(q2, i).MulAdd(kv, a2)
		a3 = ld(q3, i).MulAdd(kv, a3)
	}
	// Horizontal sums: halve each to 8 lanes, then three pairwise adds
	// leave [Σa0 Σa1 Σa2 Σa3] in each 128-bit half.
	s0 := a0.GetLo().Add(a0.GetHi())
	s1 := a1.GetLo().Add(a1.GetHi())
	s2 := a2.GetLo().Add(a2.GetHi())
	s3 := a3.GetLo().Add(a3.GetHi())
	u := s0.AddPairsGrouped(s1).AddPairsGrouped(s2.AddPairsGrouped(s3))
	return u.GetLo().Add(u.GetHi())
}

// dot1 is dot4 for one row.
func dot1(D int, q, k unsafe.Pointer) float32 {
	var a vec
	for i := 0; i < D; i += 16 {
		a = ld(q, i).MulAdd(ld(k, i), a)
	}
	s := a.GetLo().Add(a.GetHi())
	t := s.GetLo().Add(s.GetHi())
	t = t.AddPairs(t)
	return t.AddPairs(t).GetElem(0)
}

// swapHalves exchanges the two 8-lane halves of a vector. It is built in
// init, behind the AVX-512 check, like every vector constant.
var swapHalves archsimd.Uint32x16

// softmaxPairs is softmaxBlockScalar for scores p [jp][8] (jp even), each
// 16-lane vector holding two keys of the same eight rows. m, l and corr
// hold 16 values: the eight rows twice, so both halves stay in step.
func softmaxPairs(p []float32, m, l, corr []float32) {
	if len(p)%16 != 0 || len(m) < 16 || len(l) < 16 || len(corr) < 16 {
		panic("attention: softmaxPairs bounds") // unreachable
	}
	pp := ptr(p)
	mOld := ld(ptr(m), 0)
	mx := mOld
	for x := 0; x < len(p); x += 16 {
		mx = mx.Max(ld(pp, x))
	}
	mx = mx.Max(mx.Permute(swapHalves))
	var sum vec
	for x := 0; x < len(p); x += 16 {
		e := ec.exp(ld(pp, x).Sub(mx))
		st(e, pp, x)
		sum = sum.Add(e)
	}
	sum = sum.Add(sum.Permute(swapHalves))
	cr := ec.exp(mOld.Sub(mx))
	st(cr, ptr(corr), 0)
	st(ld(ptr(l), 0).MulAdd(cr, sum), ptr(l), 0)
	st(mx, ptr(m), 0)
}

// scaleRowAVX512 is scaleRowScalar, 16 values per step.
func scaleRowAVX512(r []float32, c float32) {
	cv := splat(c)
	i := 0
	for ; i+16 <= len(r); i += 16 {
		archsimd.LoadFloat32x16Slice(r[i:]).Mul(cv).StoreSlice(r[i:])
	}
	for ; i < len(r); i++ { // a scalar tail: partial loads trip checkptr
		r[i] *= c
	}
}
