package weights

import "syscall"

func willNeed(b []byte) error { return syscall.Madvise(b, syscall.MADV_WILLNEED) }

func random(b []byte) error { return syscall.Madvise(b, syscall.MADV_RANDOM) }
