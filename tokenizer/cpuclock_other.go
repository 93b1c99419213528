//go:build !linux

package tokenizer

import "time"

// threadCPU falls back to the wall clock where no per-thread CPU clock is
// read: the limits then measure elapsed time, load included.
func threadCPU() time.Duration { return time.Since(clockStart) }

// cpuClock says whether threadCPU measures CPU time (else the wall clock).
const cpuClock = false
