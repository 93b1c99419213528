//go:build unix

package features

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/qwenref/qwenref/internal/safeio"
)

// lockOut takes an exclusive lock on the --out directory itself (no lock
// file is written) for as long as the run lasts, so that a second run on
// the same directory stops at once instead of writing the same shards as
// the first. The kernel drops the lock when the process ends, however it
// ends, so a killed run leaves nothing to clean up.
func lockOut(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("--out %s: another qwenref features run is writing there (it holds the directory's lock): wait for it to end, or use another directory", safeio.Clean(dir))
		}
		return nil, fmt.Errorf("--out %s: locking it: %w", safeio.Clean(dir), err)
	}
	return func() { f.Close() }, nil
}
