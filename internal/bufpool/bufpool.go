// Package bufpool lends the large float32 work buffers of a forward pass
// (a layer's projections, its MLP's intermediate rows) from a pool, so a
// prefill does not allocate and zero about 170 MB per 27B decoder layer
// at T = 512: that clearing ran on one thread, 3% of the layer's CPU
// profile on one core and so a growing share as the products use more.
//
// A lent buffer holds whatever its last user left in it: take one only
// for outputs that are written in full before they are read. The pool
// keeps buffers across calls until the garbage collector drops them (two
// collections unused), so its memory is what one pass needs.
package bufpool

import (
	"math/bits"
	"sync"
)

// minPooled is the smallest length worth pooling (256 KiB): shorter
// buffers are cheap to allocate and would only fragment the classes.
const minPooled = 1 << 16

// A class is a capacity: 4 per power of two (2^e × 4/4, 5/4, 6/4, 7/4),
// so a lent buffer is at most 25% longer than asked for.
const perOctave = 4

var pools [64 * perOctave]sync.Pool

// class returns the smallest class whose capacity is ≥ n, and that
// capacity.
func class(n int) (int, int) {
	e := bits.Len(uint(n)) - 1 // 2^e ≤ n < 2^(e+1)
	step := (1 << e) / perOctave
	for i := range perOctave {
		if c := (1 << e) + i*step; c >= n {
			return e*perOctave + i, c
		}
	}
	return (e + 1) * perOctave, 1 << (e + 1)
}

// Get returns a buffer of length n whose contents are arbitrary.
func Get(n int) []float32 {
	if n < minPooled {
		return make([]float32, n)
	}
	k, c := class(n)
	if p, _ := pools[k].Get().(*[]float32); p != nil {
		return (*p)[:n]
	}
	return make([]float32, n, c)
}

// Put returns a buffer from Get to the pool; the caller must not use it
// afterwards. Other slices are ignored.
func Put(s []float32) {
	n := cap(s)
	if n < minPooled {
		return
	}
	k, c := class(n)
	if c != n {
		return // not one of ours
	}
	s = s[:0]
	pools[k].Put(&s)
}

// Buffers lends a forward pass its buffers and takes them all back at once.
// The zero value lends fresh, zeroed allocations (for a pass whose stages
// are recorded, since a recorder may keep what it is shown); New(true) one
// that lends from the pool.
type Buffers struct {
	pooled bool
	lent   [][]float32
}

// New returns Buffers lending from the pool when pooled is set.
func New(pooled bool) *Buffers { return &Buffers{pooled: pooled} }

// Get lends a buffer of length n: from the pool (arbitrary contents) or,
// unpooled, freshly allocated.
func (b *Buffers) Get(n int) []float32 {
	if !b.pooled {
		return make([]float32, n)
	}
	s := Get(n)
	b.lent = append(b.lent, s)
	return s
}

// Release returns every lent buffer to the pool.
func (b *Buffers) Release() {
	for i, s := range b.lent {
		Put(s)
		b.lent[i] = nil
	}
	b.lent = b.lent[:0]
}

// Cap is the capacity Get(n) allocates: n itself below the pooled
// sizes, else n's class (at most 25% more). Memory estimates use it.
func Cap(n int) int {
	if n < minPooled {
		return n
	}
	_, c := class(n)
	return c
}

// Pooled reports whether Get(n) lends from the pool (a buffer kept across
// layers and calls) rather than allocating one the collector frees.
func Pooled(n int) bool { return n >= minPooled }
