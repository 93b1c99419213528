//go:build unix

package parallel

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"time"
)

// A read of a truncated mapping on a helper goroutine must come back to
// the caller as a recoverable fault panic, not kill the process.
func TestFaultOnHelperReachesCaller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mapped")
	page := os.Getpagesize()
	if err := os.WriteFile(path, make([]byte, 4*page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, 4*page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(data)
	if err := os.Truncate(path, 0); err != nil { // every page now faults
		t.Fatal(err)
	}

	var got any
	func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { got = recover() }()
		For(1000, 1, 2, func(w, lo, hi int) {
			if w == 0 {
				time.Sleep(time.Millisecond) // leave work for the helper
				return
			}
			sink += data[3*page] // SIGBUS on the helper goroutine
		})
	}()
	if got == nil {
		t.Fatal("the helper's fault did not reach the caller")
	}
	if _, ok := got.(interface{ Addr() uintptr }); !ok {
		t.Fatalf("recovered %v (%T), want a runtime fault", got, got)
	}
}

var sink byte // keeps the faulting read from being optimised away
