package weights

import "syscall"

// dontNeed drops a mapped range from the resident set. On a read-only shared
// file mapping this is harmless: the pages fault back in from the file.
func dontNeed(b []byte) error {
	return syscall.Madvise(b, syscall.MADV_DONTNEED)
}
