package linalg

import (
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
)

// ScratchBytes bounds the packing buffers that the products keep in their
// pools for a model whose products take up to m rows of x against weights
// of up to n rows and k columns: x's packed panels, W's shared block, and
// a W micro-panel per goroutine, each rounded up to its power-of-two pool
// class. The pools keep a class per shape they saw, and the classes below
// the largest add up to less than it, so each buffer is charged twice its
// largest class. Once this process has made a bf16 product on AMX
// (NewBF16Compute), which packs all of x into bf16 at once, its buffers
// are charged too. It saturates rather than overflows.
func ScratchBytes(m, k, n int) int64 {
	if m <= 0 || k <= 0 || n <= 0 {
		return 0
	}
	const f32, maxR = 4, 32 // maxR: no kernel's mr or nr is larger
	threads := int64(runtime.GOMAXPROCS(0))
	blk := defaultBlocking
	kc := int64(min(k, blk.kc))
	a := int64(ceilDiv(min(m, blk.mc), maxR)*maxR) * kc
	b := min(int64(blk.ncBytes/f32), int64(ceilDiv(n, maxR)*maxR)*kc)
	panel := kc * maxR
	if amxInUse.Load() {
		ab := defaultAMXBlocks
		kcA := int64(min(k, ab.kc))
		a = max(a, satMul(int64(ceilDiv(m, amxRows)*amxRows), int64(ceilDiv(k, amxK)*amxK)/2))
		b = max(b, int64(ceilDiv(n, amxRows)*amxRows)*kcA/2)
		panel = max(panel, int64(ab.nc)*kcA/2)
	}
	total := satAdd(satAdd(class(a), class(b)), satMul(threads, class(panel)))
	return satMul(total, 2*f32)
}

// amxInUse is set once NewBF16Compute has returned the AMX product: the
// float32 products never take its buffers.
var amxInUse atomic.Bool

// class is n rounded up to a power of two, as the pools size their buffers.
func class(n int64) int64 {
	if n <= 1 {
		return 1
	}
	if n > 1<<61 {
		return math.MaxInt64 / 16
	}
	return 1 << bits.Len64(uint64(n-1))
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/16/a {
		return math.MaxInt64 / 16
	}
	return a * b
}

func satAdd(a, b int64) int64 { return min(a+b, math.MaxInt64/16) }
