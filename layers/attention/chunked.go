package attention

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Chunked is flash-style attention: queries are processed in tiles, keys in
// blocks, and an online softmax (running row maximum m and sum l) rescales
// the partial output whenever the maximum grows, so no T×S score matrix is
// ever built: memory is O(tile), whatever S is.
//
// A tile is BlockQ query tokens times the NH/NKV query heads that share one
// KV head, so each key and value row read from the cache serves all M rows
// of the tile (GQA). Queries and scores are stored transposed, one tile row
// per SIMD lane: Qᵀ [D][M] (pre-multiplied by scale) and Sᵀ [BK][M]. So
// QKᵀ is a key element broadcast against 16 query rows at a time, and the
// softmax bookkeeping (max, exp, sum, rescale factor) is vector-wide over
// rows. PV then broadcasts probabilities against value rows into a
// row-major O [M][D], which is rescaled row by row and copied out.
//
// Tiles of at most eight rows (decode: one token, NH/NKV heads) would leave
// most lanes idle; the AVX-512 build runs them row-major instead, with q·k
// dot products along D (chunked_rows_simd.go).
//
// Tiles (KV head × query block) are shared out among GOMAXPROCS workers,
// latest queries first because causal masking makes them the longest.
// Decode (T = 1) is one tile per KV head.
type Chunked struct {
	BlockQ int // query tokens per tile; 0 means about 96 rows (96/(NH/NKV) tokens)
	BlockK int // keys per block; 0 means 64
}

const defaultBlockK = 64

// vPad pads the packed value rows. The cache's rows for one KV head lie
// NKV·D·4 bytes apart (4 KiB at the 27B shapes), so walking down a block of
// them hits a single L1 set and thrashes; a stride of D+16 floats spreads
// consecutive rows over different sets.
const vPad = 16

// tileBufs recycles per-worker tile buffers, so decode steps do not allocate.
var tileBufs = sync.Pool{New: func() any { return new(tile) }}

// tile is one worker's scratch space for one (KV head, query block).
type tile struct {
	qt, st, ot []float32 // Qᵀ·scale [D][mp], scores/probabilities [BK][mp], O [rows][D]
	vb         []float32 // one block of value rows, [BK][D+vPad]
	m, l, corr []float32 // per row: running max, running sum, rescale factor
	rowOff     []int     // per row: offset of its q/out vector
	ones       []float32 // D ones, for kernels whose rescale is done already
}

// grow sizes the tile for mp lanes (rows padded to 16), head dim d and bk keys.
func (tl *tile) grow(mp, d, bk int) {
	need := func(s []float32, n int) []float32 {
		if cap(s) < n {
			return make([]float32, n)
		}
		return s[:n]
	}
	tl.qt, tl.ot, tl.st = need(tl.qt, d*mp), need(tl.ot, d*mp), need(tl.st, bk*mp)
	tl.m, tl.l, tl.corr = need(tl.m, mp), need(tl.l, mp), need(tl.corr, mp)
	tl.vb = need(tl.vb, bk*(d+vPad))
	if cap(tl.rowOff) < mp {
		tl.rowOff = make([]int, mp)
	}
	tl.rowOff = tl.rowOff[:mp]
	if len(tl.ones) < d {
		tl.ones = make([]float32, d)
		for i := range tl.ones {
			tl.ones[i] = 1
		}
	}
}

// smallTile, when set (AVX-512 builds), handles tiles of at most
// smallRows rows, which the lane-per-row layout would leave mostly idle:
// decode with NH/NKV ≤ 8 is one such tile per KV head. It reports false
// when it cannot take the shape.
var smallTile func(tl *tile, out, q, k, v []float32, d Dims, scale float32, g, t0, t1, bk int) bool

const smallRows = 8

// Forward implements Kernel.
func (c Chunked) Forward(out, q, k, v []float32, d Dims, scale float32) error {
	if err := d.Check(out, q, k, v); err != nil {
		return err
	}
	if c.BlockQ < 0 || c.BlockK < 0 {
		return fmt.Errorf("attention: negative block sizes %+v", c)
	}
	if d.T == 0 {
		return nil
	}
	group := d.NH / d.NKV
	bq := c.BlockQ
	if bq <= 0 {
		bq = max(1, 96/group)
	}
	bq = min(bq, d.T)
	bk := c.BlockK
	if bk <= 0 {
		bk = defaultBlockK
	}
	nqb := (d.T + bq - 1) / bq
	units := nqb * d.NKV
	mp := (bq*group + 15) &^ 15

	run := func(tl *tile, u int) {
		// Unit u: latest query blocks first (they see the most keys).
		qb, g := nqb-1-u/d.NKV, u%d.NKV
		t0 := qb * bq
		c.runTile(tl, out, q, k, v, d, scale, g, t0, min(t0+bq, d.T), bk)
	}
	workers := min(runtime.GOMAXPROCS(0), units)
	if workers == 1 {
		tl := tileBufs.Get().(*tile)
		tl.grow(mp, d.D, bk)
		for u := range units {
			run(tl, u)
		}
		tileBufs.Put(tl)
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			tl := tileBufs.Get().(*tile)
			tl.grow(mp, d.D, bk)
			for u := int(next.Add(1) - 1); u < units; u = int(next.Add(1) - 1) {
				run(tl, u)
			}
			tileBufs.Put(tl)
		})
	}
	wg.Wait()
	return nil
}

// runTile computes the outputs of query tokens [t0, t1) for the query heads
// of KV head g.
func (c Chunked) runTile(tl *tile, out, q, k, v []float32, d Dims, scale float32, g, t0, t1, bk int) {
	group := d.NH / d.NKV
	rows := (t1 - t0) * group
	if rows <= smallRows && smallTile != nil && smallTile(tl, out, q, k, v, d, scale, g, t0, t1, bk) {
		return
	}
	mp := (rows + 15) &^ 15
	D := d.D
	qt, st, o := tl.qt[:D*mp], tl.st[:bk*mp], tl.ot[:rows*D]
	m, l, corr := tl.m[:mp], tl.l[:mp], tl.corr[:mp]

	// Row i is token t0 + i/group, head g·group + i%group. Qᵀ·scale is
	// packed one row at a time: the row is read contiguously and its writes
	// land in the sixteen-lane group's cache lines, which stay in L1 while
	// the group's rows are packed. Padding rows get q = 0 (finite scores,
	// discarded at the end).
	rowOff := tl.rowOff[:mp]
	for i := range mp {
		if i >= rows {
			for j := range D {
				qt[j*mp+i] = 0
			}
			continue
		}
		t, h := t0+i/group, g*group+i%group
		rowOff[i] = (t*d.NH + h) * D
		for j, x := range q[rowOff[i] : rowOff[i]+D] {
			qt[j*mp+i] = x * scale
		}
	}
	clear(o)
	for i := range m {
		m[i], l[i] = float32(math.Inf(-1)), 0
	}

	off := d.S - d.T // absolute position of token 0
	kvStride := d.NKV * D
	lastKey := off + t1 - 1 // the last tile row sees keys 0..lastKey
	vs := D + vPad
	for j0 := 0; j0 <= lastKey; j0 += bk {
		jn := min(bk, lastKey+1-j0)

		// Sᵀ[jj][i] = Σ_d K[j0+jj][d] · Qᵀ[d][i]: the key row is the
		// broadcast operand, sixteen query rows per vector.
		gemm(jn, D, k[(j0*d.NKV+g)*D:], kvStride, 1, qt, mp, st, mp, mp, nil, true)

		// Causal mask: row i (token t) sees keys ≤ off+t. Only blocks that
		// reach past the first row's limit need it.
		if j0+jn-1 > off+t0 {
			for i := range rows {
				lim := off + t0 + i/group // last visible key of row i
				for jj := max(0, lim+1-j0); jj < jn; jj++ {
					st[jj*mp+i] = float32(math.Inf(-1))
				}
			}
		}

		// Online softmax: m ← max(m, block max), corr = e^(m_old−m),
		// Sᵀ ← e^(Sᵀ−m), l ← l·corr + Σ_jj Sᵀ.
		softmaxBlock(st[:jn*mp], mp, m, l, corr)

		// O[i] = corr[i]·O[i] + Σ_jj Sᵀ[jj][i] · V[j0+jj]: now the
		// probabilities are broadcast and the value rows are the vectors,
		// so O stays row-major and is written out without a transpose.
		for i := range rows {
			if f := corr[i]; f != 1 {
				scaleRow(o[i*D:(i+1)*D], f)
			}
		}
		vb := tl.vb[:jn*vs]
		for jj := range jn {
			copy(vb[jj*vs:jj*vs+D], v[((j0+jj)*d.NKV+g)*D:])
		}
		gemm(rows, jn, st, 1, mp, vb, vs, o, D, D, tl.ones[:D], true)
	}

	// out = O / l; l ≥ 1, since the row maximum contributes e^0.
	for i := range rows {
		dst := out[rowOff[i] : rowOff[i]+D]
		copy(dst, o[i*D:(i+1)*D])
		scaleRow(dst, 1/l[i])
	}
}
