package weights

import (
	"os"
	"unsafe"

	"github.com/qwenref/qwenref/tensor"
)

// DropPages tells the kernel that the pages of a memory-mapped matrix are
// not needed for now, so they leave this process's resident set (they stay
// in the page cache while memory allows, and fault back in on next use).
// This is what bounds memory when a checkpoint is larger than RAM: each
// layer is paged in for its turn and dropped after it. Matrices that are
// not inside one of the store's mappings (copies on the heap) are left
// alone, since dropping anonymous memory would zero it.
func (s *Store) DropPages(m *tensor.Matrix) error {
	data, a, n, ok := s.locate(m)
	if !ok {
		return nil
	}
	// Only whole pages inside the matrix: neighbours keep theirs.
	lo := uintptr(unsafe.Pointer(&data[0]))
	page := uintptr(os.Getpagesize())
	start := (a + page - 1) &^ (page - 1)
	end := (a + n) &^ (page - 1)
	if end <= start {
		return nil
	}
	return dontNeed(data[start-lo : end-lo])
}
