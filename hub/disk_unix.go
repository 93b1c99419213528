//go:build unix

package hub

import "syscall"

// freeBytes is the space available to this user on the filesystem that
// holds path (or its nearest existing parent).
func freeBytes(path string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(nearestExisting(path), &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
