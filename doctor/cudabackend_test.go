package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/cuda"
	"github.com/qwenref/qwenref/model"
)

// residentPart stands in for the cuda backend with its device part alone
// (cuda.SupportsResident needs no GPU), so the tests run anywhere.
func residentPart() (*model.Backend, error) {
	return &model.Backend{Name: CUDABackend, Device: &model.Device{Supports: cuda.SupportsResident}}, nil
}

func init() {
	model.RegisterBackend(CUDABackend, "test: the cuda backend's device part, no GPU", residentPart)
}

// withCUDA registers factory as the cuda backend for one test.
func withCUDA(t *testing.T, factory func() (*model.Backend, error)) {
	model.RegisterBackend(CUDABackend, "test", factory)
	t.Cleanup(func() {
		model.RegisterBackend(CUDABackend, "test: the cuda backend's device part, no GPU", residentPart)
	})
}

// Layers asks the registered cuda backend's device part, releases the
// backend, and names a backend that cannot start.
func TestLayersAskTheDevicePart(t *testing.T) {
	js, err := model.ShapeConfigJSON("27b")
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(p, js, 0o644))

	released := 0
	withCUDA(t, func() (*model.Backend, error) {
		return &model.Backend{Device: &model.Device{Supports: func(*model.Config) error { return errors.New("no room for it") }},
			Release: func() error { released++; return nil }}, nil
	})
	l, err := LayersFromConfig(p)
	require.NoError(t, err)
	assert.Equal(t, "no room for it", l.QwenrefCUDA)
	assert.Equal(t, 1, released, "the backend opened for the question is released")

	withCUDA(t, func() (*model.Backend, error) { return nil, errors.New("no NVIDIA driver") })
	l, err = LayersFromConfig(p)
	require.NoError(t, err)
	assert.Equal(t, "the cuda backend cannot start here: no NVIDIA driver", l.QwenrefCUDA)

	withCUDA(t, func() (*model.Backend, error) { return &model.Backend{}, nil })
	l, err = LayersFromConfig(p)
	require.NoError(t, err)
	assert.Empty(t, l.QwenrefCUDA, "a backend without a device part holds what it runs")
}
