//go:build !unix && !windows

package weights

import (
	"errors"
	"os"
)

// mmapFile is unavailable here: the reader never falls back to reading a
// whole checkpoint into memory, so it refuses instead.
func mmapFile(*os.File, int64) ([]byte, error) {
	return nil, errors.New("memory-mapped checkpoints are only supported on unix")
}

func munmap([]byte) error { return nil }
