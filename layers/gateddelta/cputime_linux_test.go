//go:build linux

package gateddelta

import (
	"syscall"
	"unsafe"
)

// ProcessCPU returns the CPU time this process has used, all threads
// together (CLOCK_PROCESS_CPUTIME_ID), in seconds. Benchmarks report it
// beside wall time because this machine is shared: a kernel's CPU seconds
// move much less with other people's load than its wall seconds do.
func ProcessCPU() float64 {
	var ts syscall.Timespec
	const clockProcessCPUTimeID = 2
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockProcessCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return -1
	}
	return float64(ts.Nano()) / 1e9
}
