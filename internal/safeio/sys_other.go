//go:build !unix

package safeio

import "os"

// openNonblock opens path read-only. Without O_NONBLOCK here, the type
// check after the open is what refuses special files.
func openNonblock(path string) (*os.File, error) { return os.Open(path) }

func setBlocking(*os.File) error { return nil }

// writable leaves the check to the write itself.
func writable(string) error { return nil }

// processAlive cannot tell here, so no temp is ever taken for stale.
func processAlive(int) bool { return true }

// extraSignals: only SIGINT and SIGTERM here.
var extraSignals []os.Signal

// ignorable: every handled signal ends a writer here.
func ignorable(os.Signal) bool { return false }

// reraise exits with the shell's code for the signal.
func reraise(os.Signal) { os.Exit(130) }

// freeBytes cannot tell on this platform.
func freeBytes(string) (int64, bool) { return 0, false }
