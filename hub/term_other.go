//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package hub

import "os"

// IsTerminal reports false here: no progress bars where a terminal
// cannot be recognised.
func IsTerminal(*os.File) bool { return false }
