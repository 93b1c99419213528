//go:build !unix

package safeio

import (
	"os"
)

// openNoFollow checks with Lstat that path is not a link, then opens it
// (there is no O_NOFOLLOW here; the type check after the open still
// refuses what is not a regular file).
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return nil, &NotRegularError{Path: path, Kind: kindOf(st.Mode())}
	}
	return os.OpenFile(path, flag, perm)
}

func links(os.FileInfo) uint64 { return 1 }
