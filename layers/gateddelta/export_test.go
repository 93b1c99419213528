package gateddelta

import "github.com/qwenref/qwenref/internal/cpu"

// Levels lists the kernel levels this CPU runs, best first.
func Levels() []cpu.Level {
	var ls []cpu.Level
	for _, ks := range levelsHere() {
		ls = append(ls, ks.level)
	}
	return ls
}

// UseLevel makes Chunked and Recurrent run level l's kernels until the
// returned function restores the selected ones. Tests using it must not
// run in parallel.
func UseLevel(l cpu.Level) (restore func()) {
	prev := active
	active = levelKernels(l)
	return func() { active = prev }
}
