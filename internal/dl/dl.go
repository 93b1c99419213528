// Package dl opens shared libraries at run time without cgo: the CUDA
// kernels (libqwenref_cuda.so, the driver, cuBLAS) and kernel plug-ins.
// On Linux, macOS, FreeBSD and NetBSD it is github.com/ebitengine/purego's
// dlopen; elsewhere (Windows included) Open says the platform cannot load
// them, so every build compiles and the features that need a library fail
// with a clear error instead.
package dl

// Mode flags for Open, as dlopen(3) takes them.
const (
	Now    = modeNow    // resolve every symbol at load time
	Global = modeGlobal // make the library's symbols visible to later loads
	Local  = modeLocal  // keep them private to this handle
)

// Open loads the shared library at path (or found by the loader's search
// when path has no slash) and returns its handle.
func Open(path string, mode int) (uintptr, error) { return open(path, mode) }

// Sym returns the address of the named symbol in a library Open returned.
func Sym(handle uintptr, name string) (uintptr, error) { return sym(handle, name) }
