//go:build !unix

package bench

import "time"

// processCPU is unknown (-1) where getrusage is missing.
func processCPU() time.Duration { return -1 }
