package gateddelta

import "github.com/qwenref/qwenref/internal/cpu"

// levelKernels returns the set for level l.
func levelKernels(cpu.Level) *kernels { return portableKernels }

// levelsHere lists the sets this build and CPU can run, best first.
func levelsHere() []*kernels { return []*kernels{portableKernels} }
