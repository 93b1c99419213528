package safeio

import (
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
