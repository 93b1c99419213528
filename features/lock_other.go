//go:build !unix

package features

// lockOut does nothing where there is no flock: two runs on one --out
// directory must not be started there (docs/features.md says so).
func lockOut(string) (func(), error) { return func() {}, nil }
