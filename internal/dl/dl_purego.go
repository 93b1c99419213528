//go:build darwin || freebsd || linux || netbsd

package dl

import "github.com/ebitengine/purego"

const (
	modeNow    = purego.RTLD_NOW
	modeGlobal = purego.RTLD_GLOBAL
	modeLocal  = purego.RTLD_LOCAL
)

func open(path string, mode int) (uintptr, error) { return purego.Dlopen(path, mode) }

func sym(handle uintptr, name string) (uintptr, error) { return purego.Dlsym(handle, name) }
