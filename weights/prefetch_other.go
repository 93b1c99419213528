//go:build !linux

package weights

// willNeed and random are no-ops where syscall offers no madvise: both are
// hints about speed only.
func willNeed([]byte) error { return nil }

func random([]byte) error { return nil }
