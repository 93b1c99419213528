//go:build !amd64 && !arm64

package attention

import "github.com/qwenref/qwenref/internal/cpu"

func init() { kern = kernelsFor(cpu.Selected()) }

// kernelsFor returns the portable kernels: this build has no others.
func kernelsFor(cpu.Level) kernels { return portable }
