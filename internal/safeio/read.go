// Package safeio is how qwenref touches files a user names: inputs are
// opened without blocking and only when they are regular files, reads are
// capped, and outputs are replaced atomically, only ever over a regular
// file that is not one of the command's inputs, with the temporary file
// removed on every exit path, signals included.
package safeio

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// LimitError reports an input larger than the limit qwenref sets for it.
type LimitError struct {
	Path  string // the file (or stream) that was read
	What  string // what it is, e.g. "config.json"
	Limit int64  // bytes allowed
}

// Error names the file, what it is and the limit (documented in docs/limits.md).
func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %s is larger than the limit of %s (see docs/limits.md)", Clean(e.Path), e.What, FormatBytes(e.Limit))
}

// NotRegularError reports an input or output path that is a directory, a
// device, a FIFO, a socket or a link to one.
type NotRegularError struct {
	Path string
	Kind string // "directory", "FIFO", "device", "socket", ...
}

// Error names the path and what it is.
func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: is a %s, not a regular file", Clean(e.Path), e.Kind)
}

// kindOf describes a non-regular file mode for messages.
func kindOf(m os.FileMode) string { return Kind(m) }

// Kind names a file type for messages ("directory", "FIFO (named pipe)",
// "symbolic link", ...).
func Kind(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO (named pipe)"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "block device"
	case m&os.ModeSymlink != 0:
		return "symbolic link"
	}
	return "special file"
}

// Open opens path for reading. It opens with O_NONBLOCK, so a FIFO or a
// device never blocks the open, then checks with fstat that what it opened
// is a regular file (following symbolic links) and refuses anything else.
// The descriptor is switched back to blocking reads before it is returned.
func Open(path string) (*os.File, os.FileInfo, error) {
	f, err := openNonblock(path)
	if err != nil {
		return nil, nil, err
	}
	return regularOnly(f, path)
}

// regularOnly keeps an opened f only if it is a regular file, switched back
// to blocking reads; otherwise it closes f and says what path is.
func regularOnly(f *os.File, path string) (*os.File, os.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Kind: kindOf(st.Mode())}
	}
	if err := setBlocking(f); err != nil {
		f.Close()
		return nil, nil, &os.PathError{Op: "open", Path: Clean(path), Err: err}
	}
	return f, st, nil
}

// ReadCapped reads a whole regular file of at most limit bytes. what says
// what the file is ("config.json", "token ids") for the error. The size is
// checked before anything is allocated, and the read itself stops at the
// limit, so a file that grows while it is read cannot exceed it either.
func ReadCapped(path string, limit int64, what string) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, &LimitError{Path: path, What: what, Limit: limit}
	}
	data, err := ReadAllCapped(f, limit, path, what)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// ReadAllCapped reads r to the end, failing with a *LimitError naming name
// once more than limit bytes arrive (a gzip stream that inflates without
// bound stops there).
func ReadAllCapped(r io.Reader, limit int64, name, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Clean(name), err)
	}
	if int64(len(data)) > limit {
		return nil, &LimitError{Path: name, What: what, Limit: limit}
	}
	return data, nil
}

// IsLimit reports whether err is (or wraps) a *LimitError.
func IsLimit(err error) bool {
	var le *LimitError
	return errors.As(err, &le)
}

// FormatBytes writes a byte count in binary units, e.g. "16 MiB".
func FormatBytes(n int64) string {
	const k = 1024
	switch {
	case n >= k*k*k && n%(k*k*k) == 0:
		return fmt.Sprintf("%d GiB", n/(k*k*k))
	case n >= k*k*k:
		return fmt.Sprintf("%.1f GiB", float64(n)/(k*k*k))
	case n >= k*k && n%(k*k) == 0:
		return fmt.Sprintf("%d MiB", n/(k*k))
	case n >= k*k:
		return fmt.Sprintf("%.1f MiB", float64(n)/(k*k))
	case n >= k && n%k == 0:
		return fmt.Sprintf("%d KiB", n/k)
	}
	return fmt.Sprintf("%d bytes", n)
}
