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
	if m == nil || s.closed.Load() {
		return nil
	}
	var p unsafe.Pointer
	var n uintptr
	switch {
	case len(m.BF16) > 0:
		p, n = unsafe.Pointer(&m.BF16[0]), uintptr(len(m.BF16))*2
	case len(m.F32) > 0:
		p, n = unsafe.Pointer(&m.F32[0]), uintptr(len(m.F32))*4
	default:
		return nil
	}
	for _, mf := range s.files {
		if len(mf.data) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(&mf.data[0]))
		hi := lo + uintptr(len(mf.data))
		a := uintptr(p)
		if a < lo || a+n > hi {
			continue
		}
		// Only whole pages inside the matrix: neighbours keep theirs.
		page := uintptr(os.Getpagesize())
		start := (a + page - 1) &^ (page - 1)
		end := (a + n) &^ (page - 1)
		if end <= start {
			return nil
		}
		b := mf.data[start-lo : end-lo]
		return dontNeed(b)
	}
	return nil
}
