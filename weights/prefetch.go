package weights

import (
	"os"
	"unsafe"

	"github.com/qwenref/qwenref/tensor"
)

// Prefetch asks the kernel to start reading a memory-mapped matrix's pages
// now (MADV_WILLNEED), in large requests, before the compute touches them.
// A mixture of experts calls it for the experts a token was routed to.
// Matrices outside the store's mappings are left alone; the advice is
// only a hint, so an error costs time, never a result.
func (s *Store) Prefetch(m *tensor.Matrix) error {
	if b := s.mapped(m); b != nil {
		return willNeed(b)
	}
	return nil
}

// ReadRandom marks a memory-mapped matrix for access without read-around
// (MADV_RANDOM): a page fault then reads that page, not the several MiB
// around it. For a stack of experts of which a token uses a few, the
// read-around would pull in the unused neighbours; Prefetch still reads
// the chosen ones in bulk.
func (s *Store) ReadRandom(m *tensor.Matrix) error {
	if b := s.mapped(m); b != nil {
		return random(b)
	}
	return nil
}

// mapped returns the page-rounded range of the mapping that holds m, or
// nil when m is not inside one (a heap copy) or the store is closed.
func (s *Store) mapped(m *tensor.Matrix) []byte {
	data, a, n, ok := s.locate(m)
	if !ok {
		return nil
	}
	lo := uintptr(unsafe.Pointer(&data[0]))
	page := uintptr(os.Getpagesize())
	start := max(a&^(page-1), lo) // the mapping itself starts on a page
	end := min((a+n+page-1)&^(page-1), lo+uintptr(len(data)))
	return data[start-lo : end-lo]
}

// locate finds the mapping that holds m's values: the mapping, and the
// address and byte length of m inside it; ok is false when m is not inside
// one of the store's mappings (a heap copy, an empty matrix) or the store
// is closed.
func (s *Store) locate(m *tensor.Matrix) (data []byte, a, n uintptr, ok bool) {
	if m == nil || s.closed.Load() {
		return nil, 0, 0, false
	}
	var p unsafe.Pointer
	switch {
	case len(m.BF16) > 0:
		p, n = unsafe.Pointer(&m.BF16[0]), uintptr(len(m.BF16))*2
	case len(m.F32) > 0:
		p, n = unsafe.Pointer(&m.F32[0]), uintptr(len(m.F32))*4
	default:
		return nil, 0, 0, false
	}
	a = uintptr(p)
	for _, mf := range s.files {
		if len(mf.data) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(&mf.data[0]))
		if a >= lo && a+n <= lo+uintptr(len(mf.data)) {
			return mf.data, a, n, true
		}
	}
	return nil, 0, 0, false
}
