package safeio

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
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

// GBPair formats two byte counts as GB with the fewest decimals, at least
// one, that tell them apart, so that a disk-space message cannot read
// "0.0 GB free but needs 0.0 GB". Equal counts get one decimal.
func GBPair(a, b int64) (string, string) {
	var sa, sb string
	for d := 1; d <= 9; d++ {
		sa = strconv.FormatFloat(float64(a)/1e9, 'f', d, 64)
		sb = strconv.FormatFloat(float64(b)/1e9, 'f', d, 64)
		if sa != sb {
			break
		}
	}
	if a == b {
		sa = strconv.FormatFloat(float64(a)/1e9, 'f', 1, 64)
		sb = sa
	}
	return sa + " GB", sb + " GB"
}
