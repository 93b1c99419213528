//go:build linux

package tokenizer

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the CPU time the calling thread has used. Encode locks its
// goroutine to one thread, so this measures the work of the call alone:
// a loaded machine slows the wall clock's view of it, not this.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return time.Since(clockStart)
	}
	return time.Duration(ts.Nano())
}

// cpuClock says whether threadCPU measures CPU time (else the wall clock).
const cpuClock = true
