//go:build !amd64 && !arm64

package gateddelta

import "github.com/qwenref/qwenref/internal/cpu"

// levelKernels returns the set for level l: other architectures have
// only the portable one.
func levelKernels(cpu.Level) *kernels { return portableKernels }

// levelsHere lists the sets this build and CPU can run, best first.
func levelsHere() []*kernels { return []*kernels{portableKernels} }
