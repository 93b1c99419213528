package attention

import "github.com/qwenref/qwenref/internal/cpu"

// UseLevel switches Chunked to the kernels of level l for a test and
// returns the function that switches back.
func UseLevel(l cpu.Level) (restore func()) {
	old := kern
	kern = kernelsFor(l)
	return func() { kern = old }
}
