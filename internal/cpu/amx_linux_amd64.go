package cpu

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux's arch_prctl codes for dynamically enabled XSAVE state (5.16+).
const (
	archGetXcompSupp  = 0x1021
	archGetXcompPerm  = 0x1022
	archReqXcompPerm  = 0x1023
	xfeatureXTileData = 18 // the 8 KiB of tile registers
)

// requestTilePermission asks Linux to let this process use the tile data
// (ARCH_REQ_XCOMP_PERM), after which the first tile instruction on each
// thread gets its larger register save area; without it that instruction
// raises SIGILL. The permission is per process and cannot be dropped.
func requestTilePermission() error {
	var mask uint64
	if _, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archGetXcompSupp, uintptr(unsafe.Pointer(&mask)), 0); e != 0 {
		return fmt.Errorf("the kernel cannot enable AMX state: arch_prctl(ARCH_GET_XCOMP_SUPP): %v (Linux 5.16 or later needed)", e)
	}
	if mask&(1<<xfeatureXTileData) == 0 {
		return errors.New("the kernel does not support the AMX tile state")
	}
	switch _, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0); e {
	case 0:
	case unix.ENOSPC:
		return errors.New("the kernel refused the AMX tile state (ENOSPC: a thread's signal stack is too small for it)")
	case unix.EINVAL:
		return errors.New("the kernel refused the AMX tile state (EINVAL: no AMX permission control; Linux 5.16 or later needed)")
	default:
		return fmt.Errorf("the kernel refused the AMX tile state: arch_prctl(ARCH_REQ_XCOMP_PERM): %v", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archGetXcompPerm, uintptr(unsafe.Pointer(&mask)), 0); e != 0 || mask&(1<<xfeatureXTileData) == 0 {
		return fmt.Errorf("the AMX tile state was not granted (arch_prctl(ARCH_GET_XCOMP_PERM): mask %#x, %v)", mask, e)
	}
	return nil
}
