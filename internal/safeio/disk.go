package safeio

import (
	"math"
	"os"
	"path/filepath"
)

// FreeBytes is the space available to this user on the filesystem that
// holds path, or its nearest existing parent when path does not exist yet;
// ok is false where the platform cannot tell (then callers skip their
// disk-space check rather than refuse).
func FreeBytes(path string) (free int64, ok bool) { return freeBytes(nearestExisting(path)) }

// nearestExisting is path made absolute, or its nearest parent that exists.
func nearestExisting(path string) string {
	p, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p
		}
		p = parent
	}
}

// ClampBytes turns a byte count computed in float64 into an int64: 0 for
// a negative (or NaN) count, math.MaxInt64 for one past it.
func ClampBytes(f float64) int64 {
	switch {
	case !(f > 0):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(f)
}
