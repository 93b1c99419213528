//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package hub

import (
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal, so that progress bars with
// '\r' go only where a person watches them.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TIOCGETA)
	return err == nil
}
