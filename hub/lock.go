package hub

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
)

// fileLock is a held .lock file.
type fileLock struct{ f *os.File }

// acquireLock takes path's exclusive lock, creating the file (its folder
// must exist: ensureDir), never through a link. It polls rather than
// blocking in the kernel so that ctx and timeout end the wait; every 10 s
// it says on log who it waits for.
func acquireLock(ctx context.Context, path string, timeout time.Duration, log io.Writer) (*fileLock, error) {
	f, _, err := safeio.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o664) // group-writable, as huggingface_hub makes them
	if err != nil {
		return nil, fmt.Errorf("lock file %w; remove it and run again", err)
	}
	start, lastNote := time.Now(), time.Now()
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", safeio.Clean(path), err)
		}
		if ok {
			return &fileLock{f}, nil
		}
		if timeout > 0 && time.Since(start) > timeout {
			f.Close()
			return nil, fmt.Errorf("%s is held by another download (Python or qwenref) for over %v: wait for it to finish, or stop it", safeio.Clean(path), timeout)
		}
		if log != nil && time.Since(lastNote) >= 10*time.Second {
			fmt.Fprintf(log, "waiting for %s (another download of the same file holds it)\n", safeio.Clean(path))
			lastNote = time.Now()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// release drops the lock; the file stays, as huggingface_hub leaves it.
func (l *fileLock) release() {
	_ = unlock(l.f)
	_ = l.f.Close()
}
