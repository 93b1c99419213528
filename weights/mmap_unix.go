//go:build unix

package weights

import (
	"fmt"
	"os"
	"syscall"
)

// mmapFile maps the whole of f read-only and shared. Shared read-only pages
// come straight from the page cache, so several processes (or a reopened
// Store) share one copy of a 50 GB checkpoint instead of each holding its own.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cannot map an empty file")
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("file of %d bytes is too large to map on this platform", size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return b, nil
}

// munmap releases a mapping made by mmapFile.
func munmap(b []byte) error {
	return syscall.Munmap(b)
}
