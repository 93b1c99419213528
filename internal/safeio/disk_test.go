package safeio

import (
	"math"
	"testing"
)

// Free space is never negative and never wraps: a filesystem reporting
// 2⁵² free blocks of 4 KiB (2⁶⁴ bytes, as object-store and FUSE mounts do)
// has all the space a download needs, not 0 bytes.
func TestClampBytes(t *testing.T) {
	for _, c := range []struct {
		bavail, bsize float64
		want          int64
	}{
		{1 << 20, 4096, 1 << 32},
		{1 << 52, 4096, math.MaxInt64},
		{float64(^uint64(0)), 4096, math.MaxInt64},
		{-3, 4096, 0}, // a signed Bavail below the reserved blocks
		{0, 4096, 0},
	} {
		if got := ClampBytes(c.bavail * c.bsize); got != c.want {
			t.Errorf("%g blocks of %g: got %d, want %d", c.bavail, c.bsize, got, c.want)
		}
	}
	if free, ok := FreeBytes(t.TempDir()); ok && free <= 0 {
		t.Errorf("FreeBytes of a temporary directory: %d", free)
	}
}

// Two byte counts are shown with enough digits to differ.
func TestGBPair(t *testing.T) {
	for _, c := range []struct {
		a, b         int64
		wantA, wantB string
	}{
		{12_000_000, 15_000_000, "0.012 GB", "0.015 GB"},
		{40_000, 41_000, "0.000040 GB", "0.000041 GB"},
		{999_999_999, 1_000_000_001, "0.999999999 GB", "1.000000001 GB"},
		{54_000_000_000, 1_000_000, "54.0 GB", "0.0 GB"},
		{5, 5, "0.0 GB", "0.0 GB"},
	} {
		a, b := GBPair(c.a, c.b)
		if a != c.wantA || b != c.wantB {
			t.Errorf("GBPair(%d, %d) = %q, %q; want %q, %q", c.a, c.b, a, b, c.wantA, c.wantB)
		}
	}
}
