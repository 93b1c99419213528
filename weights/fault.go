package weights

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"unsafe"
)

// MaxMappings caps the files all open Stores of the process may map at
// once. Each mapping is a kernel VMA; the default vm.max_map_count is
// 65530 and the Go runtime needs its own, so running out would be a fatal
// runtime error instead of an error naming the checkpoint.
const MaxMappings = 8192

var liveMappings atomic.Int64

// reserveMapping counts one more mapping or refuses, naming the file.
func reserveMapping(path string) error {
	if liveMappings.Add(1) > MaxMappings {
		liveMappings.Add(-1)
		return fmt.Errorf("weights: %s: cannot map another file: %d files are mapped already, the limit (see docs/limits.md)", clean(path), MaxMappings)
	}
	return nil
}

func releaseMapping() { liveMappings.Add(-1) }

// FaultError reports a read of a mapped file that faulted: the file was
// truncated (or its storage failed) after it was mapped. Without the guard
// that read is a SIGBUS that kills the process.
type FaultError struct {
	File   string // the mapped file
	Offset int64  // byte offset of the faulting read in the file, or -1
}

// Error names the file and says what most likely happened.
func (e *FaultError) Error() string {
	where := ""
	if e.Offset >= 0 {
		where = fmt.Sprintf(" at byte %d", e.Offset)
	}
	return fmt.Sprintf("weights: %s: reading the mapped file failed%s: it was truncated or changed while in use (or its storage failed)", clean(e.File), where)
}

// guardFault runs fn with faults on this goroutine turned into panics and
// those panics into a *FaultError; which names the file for an address.
func guardFault(fn func() error, which func(addr uintptr) (string, int64)) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		r := recover()
		if r == nil {
			return
		}
		fe, ok := r.(interface{ Addr() uintptr })
		if !ok {
			panic(r)
		}
		file, off := which(fe.Addr())
		err = &FaultError{File: file, Offset: off}
	}()
	return fn()
}

// Guard runs fn, which reads this Store's mapped tensors on the calling
// goroutine, and turns a fault on a mapped page (a shard truncated after
// Open) into a *FaultError naming the file instead of a fatal SIGBUS.
// Reads made by other goroutines that fn starts are not covered.
func (s *Store) Guard(fn func() error) error {
	return guardFault(fn, s.fileAt)
}

// fileAt finds the mapped file holding addr, for a fault message.
func (s *Store) fileAt(addr uintptr) (string, int64) {
	for _, mf := range s.files {
		if off, ok := offsetIn(mf.data, addr); ok {
			return mf.path, off
		}
	}
	return s.source, -1
}

// offsetIn gives addr's offset in the mapping b, if it lies inside.
func offsetIn(b []byte, addr uintptr) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	if addr < lo || addr >= lo+uintptr(len(b)) {
		return 0, false
	}
	return int64(addr - lo), true
}
