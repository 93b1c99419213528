//go:build !(darwin || freebsd || linux || netbsd)

package dl

import (
	"fmt"
	"runtime"
)

const (
	modeNow = 1 << iota
	modeGlobal
	modeLocal
)

func open(path string, mode int) (uintptr, error) {
	return 0, fmt.Errorf("loading %s: shared libraries cannot be loaded at run time on %s (qwenref's CUDA backend and kernel plug-ins need Linux, macOS or a BSD)", path, runtime.GOOS)
}

func sym(handle uintptr, name string) (uintptr, error) {
	return 0, fmt.Errorf("symbol %s: shared libraries are not supported on %s", name, runtime.GOOS)
}
