//go:build !cuda

package cuda

import "errors"

// ErrNotBuilt is returned by Open in builds without the `cuda` tag.
var ErrNotBuilt = errors.New("cuda: qwenref was built without the cuda tag (go build -tags cuda)")

// Device is an open CUDA backend. Without the `cuda` build tag it cannot be
// obtained: Open always fails.
type Device struct{}

// Open fails with ErrNotBuilt in builds without the `cuda` tag.
func Open() (*Device, error) { return nil, ErrNotBuilt }

// Close does nothing in builds without the `cuda` tag.
func (*Device) Close() error { return nil }
