package hub

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// The hub writes only into real directories below its root (the cache, or
// --local-dir): the root itself may be a symbolic link, as a cache moved to
// another disk often is, but models--*/, blobs/, refs/, snapshots/ and
// every folder under them must not be, so a link planted in the cache
// cannot send a download outside it. Files are written in place only
// through safeio.OpenNoFollow; everything else is a new temporary file
// renamed over its name, which replaces a link instead of following it.

// LinkError reports a symbolic link, or something else that is not a
// directory, where the hub needs a real directory.
type LinkError struct {
	Path, Root string
	Kind       string // "symbolic link", "regular file", ...
}

// Error names the path and says what to do.
func (e *LinkError) Error() string {
	return fmt.Sprintf("%s: is a %s, not a directory; qwenref writes only into real directories below %s (which itself may be a link): "+
		"remove it, or point HF_HUB_CACHE (or --local-dir) at the real location", safeio.Clean(e.Path), e.Kind, safeio.Clean(e.Root))
}

// ensureDir makes dir, and every missing folder between root and it, a
// real directory, refusing a link or a file at any level below root.
func ensureDir(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return fmt.Errorf("%s is not below %s", safeio.Clean(dir), safeio.Clean(root))
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			if err = os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			st, err = os.Lstat(p)
		}
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return &LinkError{Path: p, Root: root, Kind: kindOf(st.Mode())}
		}
	}
	return nil
}

// kindOf names a file type for messages.
func kindOf(m os.FileMode) string { return safeio.Kind(m) }

// openPartial opens a partial download for appending its missing bytes:
// never through a link, never a FIFO or device. A partial file with a
// second hard link (another name for the same bytes, possibly outside
// the cache) is not written into: its name is removed and a new file is
// started.
func openPartial(path string) (*os.File, os.FileInfo, error) {
	f, st, err := safeio.OpenNoFollow(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("partial download %w; remove it and run again", err)
	}
	if safeio.Links(st) <= 1 {
		return f, st, nil
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return nil, nil, err
	}
	f, st, err = safeio.OpenNoFollow(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("partial download %w", err)
	}
	return f, st, nil
}

// linkTarget reports where the snapshot entry pointer links to, made
// absolute, and whether it is a link at all.
func linkTarget(pointer string) (string, bool) {
	target, err := os.Readlink(pointer)
	if err != nil {
		return "", false
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(pointer), target)
	}
	return filepath.Clean(target), true
}

// inBlobs reports whether target names a file directly in blobs (compared
// as written, then with links resolved, for an absolute link written
// through another spelling of the cache).
func inBlobs(target, blobs string) bool {
	dir := filepath.Dir(target)
	if dir == filepath.Clean(blobs) {
		return true
	}
	a, err1 := filepath.EvalSymlinks(dir)
	b, err2 := filepath.EvalSymlinks(blobs)
	return err1 == nil && err2 == nil && a == b
}

// checkEntry checks one snapshot entry for reading: a regular file, or a
// link to a regular file directly in its repository's blobs/.
func checkEntry(pointer, blobs string) error {
	lst, err := os.Lstat(pointer)
	if err != nil {
		return err
	}
	if lst.Mode()&os.ModeSymlink == 0 {
		if !lst.Mode().IsRegular() {
			return &safeio.NotRegularError{Path: pointer, Kind: kindOf(lst.Mode())}
		}
		return nil
	}
	target, _ := linkTarget(pointer)
	if !inBlobs(target, blobs) {
		raw, _ := os.Readlink(pointer)
		return fmt.Errorf("%s links to %s, outside its repository's blobs/: the cache is damaged or was tampered with", safeio.Clean(pointer), safeio.Clean(raw))
	}
	st, err := os.Lstat(target)
	if err != nil {
		raw, _ := os.Readlink(pointer)
		return fmt.Errorf("%s points to %s, which is missing", safeio.Clean(pointer), safeio.Clean(raw))
	}
	if !st.Mode().IsRegular() {
		return &safeio.NotRegularError{Path: target, Kind: kindOf(st.Mode())}
	}
	return nil
}

// readSmall reads a small bookkeeping file (a ref, local-dir metadata)
// through the safe opener; a missing file is (nil, nil).
func readSmall(path string, limit int64, what string) ([]byte, error) {
	data, err := safeio.ReadCapped(path, limit, what)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// hashFile feeds path's content to w, through the safe opener.
func hashFile(path string, w io.Writer) (int64, error) {
	f, _, err := safeio.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}
