package model

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
)

// Backend is one set of kernels for every op of the model. Swapping the
// backend swaps how each layer computes, never what it computes.
type Backend struct {
	Name   string
	MatMul linalg.MatMuler
	Conv   conv1d.Kernel
	Delta  gateddelta.Kernel
	Attn   attention.Kernel
	// Release frees backend resources (device memory); nil for CPU backends.
	Release func() error
}

// Close releases the backend's resources.
func (b *Backend) Close() error {
	if b == nil || b.Release == nil {
		return nil
	}
	return b.Release()
}

func (b *Backend) gdnOps() gateddelta.Ops {
	return gateddelta.Ops{MatMul: b.MatMul, Conv: b.Conv, Core: b.Delta}
}

func (b *Backend) attnOps() attention.Ops { return attention.Ops{MatMul: b.MatMul, Core: b.Attn} }

var (
	regMu    sync.Mutex
	registry = map[string]func() (*Backend, error){}
	regHelp  = map[string]string{}
)

// RegisterBackend makes a backend available by name; the CUDA package
// registers "cuda" when built with the cuda tag.
func RegisterBackend(name, help string, factory func() (*Backend, error)) {
	regMu.Lock()
	defer regMu.Unlock()
	registry[name] = factory
	regHelp[name] = help
}

// NewBackend returns the named backend.
func NewBackend(name string) (*Backend, error) {
	regMu.Lock()
	f, ok := registry[name]
	regMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown backend %q (available: %v)", name, BackendNames())
	}
	return f()
}

// BackendNames lists the registered backends, naive first.
func BackendNames() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return order(names[i]) < order(names[j]) })
	return names
}

// BackendHelp returns a one-line description of a backend.
func BackendHelp(name string) string {
	regMu.Lock()
	defer regMu.Unlock()
	return regHelp[name]
}

func order(n string) string {
	if i := slices.Index([]string{"naive", "chunked", "cuda"}, n); i >= 0 {
		return string(rune('0' + i))
	}
	return "9" + n
}

func init() {
	RegisterBackend("naive", "per-position loops that mirror the equations (the readable truth)", func() (*Backend, error) {
		return &Backend{Name: "naive", MatMul: linalg.Naive{}, Conv: conv1d.Naive{}, Delta: gateddelta.Naive{}, Attn: attention.Naive{}}, nil
	})
	RegisterBackend("chunked", "the fast CPU path: packed SIMD GEMM, WY/UT chunked delta rule, streaming conv, tiled online-softmax attention", func() (*Backend, error) {
		return &Backend{Name: "chunked", MatMul: linalg.Blocked{}, Conv: conv1d.Chunked{}, Delta: gateddelta.Chunked{}, Attn: attention.Chunked{}}, nil
	})
}
