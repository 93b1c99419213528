// Package openblas wraps OpenBLAS's cblas_sgemm for comparison benchmarks
// against linalg.Blocked. Its code builds only with -tags openblas (cgo and
// apt-get install libopenblas-dev); it is never a default and no test needs it:
//
//	go test -tags openblas -bench . ./linalg/internal/openblas
package openblas
