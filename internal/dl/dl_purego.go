//go:build darwin || freebsd || linux || netbsd

package dl

import (
	"runtime"

	"github.com/ebitengine/purego"
)

const (
	modeNow    = purego.RTLD_NOW
	modeGlobal = purego.RTLD_GLOBAL
	modeLocal  = purego.RTLD_LOCAL
)

// dlerror's message is per thread: the call and the dlerror purego makes
// after it must run on one, or the reason comes back empty or another's.
func open(path string, mode int) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, mode)
}

func sym(handle uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(handle, name)
}
