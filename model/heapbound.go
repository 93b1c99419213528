package model

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
)

// BoundHeap sets the Go runtime's soft memory limit to what the process
// holds now, after a collection that returns the free pages to the OS,
// plus 15/16 of extra bytes, and returns
// the limit (0 when it set none). The limit is soft: an allocation made
// while a collection runs is granted, so the last 1/16 of extra is left
// for what the program allocates before the collector catches up. Go's collector otherwise lets the heap grow to
// twice what was live at its last collection before it collects again, so
// a run whose live memory fits its estimate may still peak well past it
// on the garbage it made in between: with the limit the collector runs
// sooner instead, and the run's peak stays within its estimate as long as
// what it keeps live does. A GOMEMLIMIT in the environment is the user's
// choice and is left alone, as is extra ≤ 0 (no estimate).
func BoundHeap(extra int64) int64 {
	if extra <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	// A collection that also returns the free pages to the OS: what the
	// process holds is then what is live, and the run's allocations are
	// new pages, not ones that loading left free.
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	held := int64(s[0].Value.Uint64() - s[1].Value.Uint64())
	extra -= extra / 16
	if extra > math.MaxInt64-held {
		return 0
	}
	debug.SetMemoryLimit(held + extra)
	return held + extra
}
