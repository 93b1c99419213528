//go:build unix

package hub

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting: the same lock
// Python's filelock (huggingface_hub's WeakFileLock) takes, so the two
// exclude each other. The kernel drops it when the process dies.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == syscall.EWOULDBLOCK {
		return false, nil
	}
	return err == nil, err
}

func unlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
