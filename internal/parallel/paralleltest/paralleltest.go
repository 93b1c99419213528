// Package paralleltest helps tests check that work split by package
// parallel gives the same bits whatever the number of threads.
package paralleltest

import "runtime"

// OneAndFour runs run with GOMAXPROCS 1, then 4, and returns both results
// (GOMAXPROCS is restored after). Tests compare them for equality.
func OneAndFour[T any](run func() T) (one, four T) {
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	one = run()
	runtime.GOMAXPROCS(4)
	four = run()
	return one, four
}
