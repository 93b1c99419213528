//go:build !amd64 && !arm64

package vecmath

import "github.com/qwenref/qwenref/internal/cpu"

func init() { use(cpu.Selected()) }

// kernelsFor returns the portable kernels: this GOARCH has no others.
func kernelsFor(cpu.Level) kernels { return portable }
