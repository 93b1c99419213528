//go:build windows

package weights

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// mmapFile maps the whole of f read-only (a file mapping and one view of
// it), so Windows reads checkpoints from the page cache as unix does.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cannot map an empty file")
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("file of %d bytes is too large to map on this platform", size)
	}
	h, err := windows.CreateFileMapping(windows.Handle(f.Fd()), nil, windows.PAGE_READONLY, uint32(size>>32), uint32(size), nil)
	if err != nil {
		return nil, fmt.Errorf("CreateFileMapping: %w", err)
	}
	// The view keeps the mapping alive; the handle can go at once.
	defer windows.CloseHandle(h)
	addr, err := windows.MapViewOfFile(h, windows.FILE_MAP_READ, 0, 0, uintptr(size))
	if err != nil {
		return nil, fmt.Errorf("MapViewOfFile: %w", err)
	}
	// A slice header over the view (the address is not Go memory, so this
	// is the form go vet accepts for turning it into a slice).
	view := struct {
		addr     uintptr
		len, cap int
	}{addr, int(size), int(size)}
	return *(*[]byte)(unsafe.Pointer(&view)), nil
}

// munmap releases a view made by mmapFile.
func munmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return windows.UnmapViewOfFile(uintptr(unsafe.Pointer(&b[0])))
}
