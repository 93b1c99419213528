//go:build !linux

package weights

// dontNeed is a no-op where syscall offers no madvise: dropping pages only
// saves memory, so skipping it changes no result.
func dontNeed([]byte) error { return nil }
