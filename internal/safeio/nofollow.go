package safeio

import (
	"errors"
	"os"
)

// OpenNoFollow opens path with flag (os.O_RDWR|os.O_CREATE and the like)
// for a file qwenref writes in place, such as a partial download or a lock:
// a symbolic link at its last component is refused rather than followed,
// a FIFO or device never blocks the open, and anything but a regular file
// is refused with a *NotRegularError. The directories above path are the
// caller's to check. The descriptor is blocking again when returned.
func OpenNoFollow(path string, flag int, perm os.FileMode) (*os.File, os.FileInfo, error) {
	f, err := openNoFollow(path, flag, perm)
	if err != nil {
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			return nil, nil, &NotRegularError{Path: path, Kind: kindOf(st.Mode())}
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, nil, &os.PathError{Op: pe.Op, Path: Clean(path), Err: pe.Err}
		}
		return nil, nil, err
	}
	return regularOnly(f, path)
}

// Links is the number of hard links of the file st describes, or 1 where
// the platform does not say. A file written in place with more than one
// link would change another name too.
func Links(st os.FileInfo) uint64 { return links(st) }
