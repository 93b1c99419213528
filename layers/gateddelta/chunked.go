package gateddelta

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/qwenref/qwenref/internal/parallel"
)

// Chunked is the chunked CPU kernel: the chunked (WY/UT) form of doc.go
// for every whole chunk, and the fused single-pass recurrence of Recurrent
// for sequences shorter than one chunk (decode) and for the ragged tail of
// longer ones, so no work is spent on padding. (On a 2-core CPU,
// Recurrent is the faster of the two at every length; see
// docs/perf-gateddelta.md.) Work is spread over GOMAXPROCS goroutines by
// key head (value heads sharing a key head share the chunk's K Kᵀ and
// Q Kᵀ products) or by value head when there are fewer than two key heads
// per core.
type Chunked struct {
	// ChunkSize is the chunk length C: 16, 32, 64 or 128; 0 means 64.
	ChunkSize int
}

// DefaultChunkSize is the chunk length used when Chunked.ChunkSize is 0,
// the same as transformers and fla.
const DefaultChunkSize = 64

func (c Chunked) chunkSize() (int, error) {
	switch c.ChunkSize {
	case 0:
		return DefaultChunkSize, nil
	case 16, 32, 64, 128:
		return c.ChunkSize, nil
	}
	return 0, fmt.Errorf("gateddelta: chunk size %d, want 16, 32, 64 or 128 (0 for %d)", c.ChunkSize, DefaultChunkSize)
}

// Forward implements Kernel. See Kernel for the layouts.
func (c Chunked) Forward(out, q, k, v, g, beta []float32, d Dims, state []float32) error {
	C, err := c.chunkSize()
	if err != nil {
		return err
	}
	if err := d.Check(out, q, k, v, g, beta, state); err != nil {
		return err
	}
	if d.T == 0 {
		return nil
	}
	p := &problem{out: out, q: q, k: k, v: v, g: g, beta: beta, d: d, state: state, C: C, ks: active}
	nFull := d.T / C
	if nFull == 0 {
		// Shorter than a chunk: the fused recurrence is cheaper than one
		// padded chunk and has no setup cost (decode is T = 1).
		p.recurrentAll()
		return nil
	}
	p.forEachGroup(func(w *scratch, kh, h0, h1, c0, c1 int) { p.chunkGroup(w, kh, h0, h1, c0, c1, nFull) })
	return nil
}

// forEachGroup runs body for every key head kh with its value heads
// [h0,h1) and value columns [c0,c1) in parallel. With two key heads or more
// per core a unit is a key head, all its value heads and columns. Below
// that a unit is one value head, which redoes the per-key-head work (10–20%
// more CPU time), and, below four value heads per core, a block of its
// state's columns, which redoes the chunk's transforms (a few percent):
// the state's value columns evolve independently. The dynamic hand-out
// then has units to balance. On the 16-vCPU Xeon of docs/perf.md, one key
// head per core left most cores idle behind the slowest unit (the 27B's
// core at T = 2048 took 71 ms by key head, 44 ms by value head).
func (p *problem) forEachGroup(body func(w *scratch, kh, h0, h1, c0, c1 int)) {
	d := p.d
	r := d.NV / d.NK
	procs := runtime.GOMAXPROCS(0)
	if d.NK >= 2*procs {
		forEachScratch(d.NK, func(w *scratch, kh int) { body(w, kh, kh*r, (kh+1)*r, 0, d.DV) })
		return
	}
	width := d.DV
	if d.NV < 4*procs {
		// Blocks of at least 32 columns, whole 16-column vectors.
		blocks := max(1, min(ceilDiv(4*procs, d.NV), d.DV/32))
		width = ceilDiv(ceilDiv(d.DV, blocks), 16) * 16
	}
	blocks := ceilDiv(d.DV, width)
	forEachScratch(d.NV*blocks, func(w *scratch, u int) {
		h, c0 := u/blocks, (u%blocks)*width
		body(w, h/r, h, h+1, c0, min(d.DV, c0+width))
	})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// problem bundles one Forward call's arguments for the workers.
type problem struct {
	out, q, k, v, g, beta []float32
	d                     Dims
	state                 []float32
	C                     int
	ks                    *kernels // the inner loops of the selected level
}

// scratch is one worker's reusable memory. Buffers grow on demand. The
// chunk-step names are doc.go's symbols.
type scratch struct {
	kk, qk, kTr           []float32    // per key-head chunk, shared by its value heads: K Kᵀ, Q Kᵀ, Kᵀ
	kc, qc                []float32    // the chunk's K and Q rows, contiguous
	gam                   []float64    // γ, the cumulative log-decay
	eGam, eTail, betaEGam []float32    // e^γ, e^{γ_C−γ}, β e^γ
	row                   []float32    // a Γ row, then scratch of unitLowerInverse
	m, p                  []float32    // A then M = (I + A)⁻¹ in place; P
	r, delta              []float32    // V_β then R in place; Δ = M R
	kTail                 []float32    // K̃ = diag(e^{γ_C−γ}) K
	blk                   []float32    // the recurrence's state, as contiguous column blocks
	wq, wk, wv, wo        []float32    // a window's q̂, k̂, v and o rows, contiguous
	toks                  []tokScalars // per value head of the group
}

// grow returns buf resized to n, reallocating only when too small.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// growF64 is grow for float64 buffers.
func growF64(buf []float64, n int) []float64 {
	if cap(buf) < n {
		return make([]float64, n)
	}
	return buf[:n]
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// forEachScratch runs body(w, i) for i in [0,n) through parallel.Each,
// one index at a time (units are big and may be uneven), giving each
// worker its own scratch from the pool.
func forEachScratch(n int, body func(w *scratch, i int)) {
	ws := make([]*scratch, parallel.Workers(n, 0))
	parallel.Each(n, 0, func(worker, i int) {
		if ws[worker] == nil {
			ws[worker] = scratchPool.Get().(*scratch)
		}
		body(ws[worker], i)
	})
	for _, w := range ws {
		if w != nil {
			scratchPool.Put(w)
		}
	}
}

// chunkGroup runs value columns [c0,c1) of value heads [h0,h1), all
// reading key head kh, over the nFull whole chunks, then the ragged tail
// with the fused recurrence. chunkStep reads the chunk's K and Q from w.kc
// and w.qc.
func (p *problem) chunkGroup(w *scratch, kh, h0, h1, c0, c1, nFull int) {
	d, C := p.d, p.C
	dk := d.DK
	ldqk := d.NK * dk
	w.kk = grow(w.kk, C*C)
	w.qk = grow(w.qk, C*C)
	w.kTr = grow(w.kTr, dk*C)
	w.kc, w.qc = grow(w.kc, C*dk), grow(w.qc, C*dk)
	for n := 0; n < nFull; n++ {
		t0 := n * C
		// The chunk's K and Q rows, contiguous: the row copies stream
		// them in with many cache misses in flight (in place they sit
		// NK·DK floats apart and every later pass would pay the misses).
		for r := 0; r < C; r++ {
			copy(w.kc[r*dk:(r+1)*dk], p.k[(t0+r)*ldqk+kh*dk:])
			copy(w.qc[r*dk:(r+1)*dk], p.q[(t0+r)*ldqk+kh*dk:])
		}
		// Kᵀ (dk×C) so both score products are plain row-major A·B.
		for r := 0; r < C; r++ {
			for i, x := range w.kc[r*dk : (r+1)*dk] {
				w.kTr[i*C+r] = x
			}
		}
		// K Kᵀ (strictly lower part used) and Q Kᵀ (lower incl. diagonal):
		// the β- and decay-free parts of A and P, shared by the group.
		p.ks.gemm(C, C, dk, 1, w.kc, dk, 1, w.kTr, C, 0, w.kk, C, triLowerC, nil)
		p.ks.gemm(C, C, dk, 1, w.qc, dk, 1, w.kTr, C, 0, w.qk, C, triLowerC, nil)
		for h := h0; h < h1; h++ {
			p.chunkStep(w, h, t0, c0, c1)
		}
	}
	if t0 := nFull * C; t0 < d.T {
		p.recurrentGroup(w, kh, h0, h1, c0, c1, t0, d.T)
	}
}
