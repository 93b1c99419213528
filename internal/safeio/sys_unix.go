//go:build unix

package safeio

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openNonblock opens path read-only with O_NONBLOCK, so that opening a
// FIFO or a device returns at once.
func openNonblock(path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: Clean(path), Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// setBlocking turns O_NONBLOCK off again for ordinary reads.
func setBlocking(f *os.File) error { return syscall.SetNonblock(int(f.Fd()), false) }

// writable asks the kernel whether this process may write path.
func writable(path string) error { return syscall.Access(path, 2 /* W_OK */) }

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// extraSignals also end a writer, after its temps are removed: the
// terminal hanging up, and a broken pipe (see ignorable).
var extraSignals = []os.Signal{syscall.SIGHUP, syscall.SIGPIPE}

// ignorable reports a SIGPIPE that came from a descriptor other than
// standard output and standard error, which Go turns into an EPIPE error
// for the write that caused it.
func ignorable(sig os.Signal) bool { return sig == syscall.SIGPIPE && !stdStreamBroken() }

// stdStreamBroken reports whether standard output or standard error is a
// pipe whose reader is gone (poll reports an error on it).
func stdStreamBroken() bool {
	fds := []unix.PollFd{{Fd: 1, Events: unix.POLLOUT}, {Fd: 2, Events: unix.POLLOUT}}
	if _, err := unix.Poll(fds, 0); err != nil {
		return false
	}
	for _, f := range fds {
		if f.Revents&unix.POLLERR != 0 {
			return true
		}
	}
	return false
}

// reraise ends the process with sig's default action.
func reraise(sig os.Signal) {
	s := sig.(syscall.Signal)
	signal.Reset(s)
	_ = syscall.Kill(os.Getpid(), s)
	time.Sleep(time.Second) // the re-raised signal ends the process; this is a fallback
	os.Exit(128 + int(s))
}

func freeBytes(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, false
	}
	// In float64: the product of the two overflows int64 on filesystems
	// that report near-unlimited space (FUSE, object stores), and some
	// systems' Bavail is signed and may be negative.
	return ClampBytes(float64(st.Bavail) * float64(st.Bsize)), true
}
