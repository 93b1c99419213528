package model

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// BoundHeap sets the collector's limit to what the process holds plus
// 15/16 of the estimate, and leaves a user's GOMEMLIMIT alone.
func TestBoundHeap(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	const extra = 1 << 30
	limit := BoundHeap(extra)
	assert.Equal(t, limit, debug.SetMemoryLimit(-1), "the limit returned is the one set")
	assert.Greater(t, limit, int64(extra-extra/16))

	debug.SetMemoryLimit(math.MaxInt64)
	assert.Zero(t, BoundHeap(0), "no estimate, no limit")
	t.Setenv("GOMEMLIMIT", "8GiB")
	assert.Zero(t, BoundHeap(extra))
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "a user's GOMEMLIMIT is theirs")
}
