package model

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/linalg"
)

// Backend is one set of kernels for every op of the model. Swapping the
// backend swaps how each layer computes, never what it computes.
type Backend struct {
	// Name is the spec the backend was built from, e.g. "chunked:delta=naive".
	Name   string
	MatMul linalg.MatMuler
	Conv   conv1d.Kernel
	Delta  gateddelta.Kernel
	Attn   attention.Kernel
	// MoE computes the routed experts of sparse layers (nil: moe.Grouped).
	MoE moe.Kernel
	// Release frees backend resources (device memory); nil for CPU backends.
	Release func() error
	// NewRunner, when set, runs the whole model itself (a device-resident
	// model: weights uploaded once, activations never leave the device);
	// model.NewRunner calls it instead of building CPU sessions. Such a
	// backend takes no part swaps.
	NewRunner func(m *Model, rows int) (Runner, error)
}

// checkSessionKernels refuses a backend without the kernels a CPU Session
// calls: a device-resident backend runs only through NewRunner.
func (b *Backend) checkSessionKernels() error {
	if b.MatMul == nil || b.Conv == nil || b.Delta == nil || b.Attn == nil {
		return fmt.Errorf("backend %q runs the whole model on its device: use model.NewRunner, not a Session", b.Name)
	}
	return nil
}

// Close releases the backend's resources.
func (b *Backend) Close() error {
	if b == nil || b.Release == nil {
		return nil
	}
	return b.Release()
}

// Parts are the ops a backend spec can swap: "chunked:delta=naive:conv=naive".
var Parts = []string{"matmul", "conv", "delta", "attn", "moe"}

// A variant is a named kernel for one part, e.g. delta=recurrent.
type variant struct {
	help string
	make func() (any, error)
}

var (
	regMu    sync.Mutex
	registry = map[string]func() (*Backend, error){}
	regHelp  = map[string]string{}
	variants = map[string]map[string]variant{}
)

// RegisterBackend makes a backend available by name; the CUDA package
// registers its backends (cuda, cuda-fp32, cuda-ops) when it is imported.
func RegisterBackend(name, help string, factory func() (*Backend, error)) {
	regMu.Lock()
	defer regMu.Unlock()
	registry[name] = factory
	regHelp[name] = help
}

// RegisterKernel makes a kernel variant available as PART=NAME in backend
// specs (part is one of Parts). make returns a value implementing the
// part's interface: linalg.MatMuler, conv1d.Kernel, gateddelta.Kernel,
// attention.Kernel or moe.Kernel. Plug-in kernels register here too.
func RegisterKernel(part, name, help string, make func() (any, error)) error {
	if !slices.Contains(Parts, part) {
		return fmt.Errorf("unknown part %q (parts: %s)", part, strings.Join(Parts, ", "))
	}
	if name == "" || strings.ContainsAny(name, ":=,") {
		return fmt.Errorf("kernel name %q must be non-empty and free of ':', '=' and ','", name)
	}
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		return fmt.Errorf("%s kernel %q: the name is taken by a backend", part, name)
	}
	if _, dup := variants[part][name]; dup {
		return fmt.Errorf("%s kernel %q is already registered", part, name)
	}
	if variants[part] == nil {
		variants[part] = map[string]variant{}
	}
	variants[part][name] = variant{help: help, make: make}
	return nil
}

// Spec is a parsed backend spec: a base backend and the part swaps, in
// the order given.
type Spec struct {
	Base  string
	Swaps []Swap
}

// Swap replaces one part's kernel: Part=Name.
type Swap struct{ Part, Name string }

// ParseSpec checks a spec's grammar and names without building anything
// (no device is opened): a base backend (`naive`, `chunked`, `cuda`, …)
// followed by part swaps `:PART=NAME`, where PART is matmul, conv, delta,
// attn or moe and NAME is a kernel variant of that part (`delta=recurrent`,
// `delta=chunked16`, `matmul=bf16`, …) or a backend whose kernel for the
// part is taken.
func ParseSpec(spec string) (Spec, error) {
	fields := strings.Split(strings.TrimSpace(spec), ":")
	regMu.Lock()
	_, ok := registry[fields[0]]
	regMu.Unlock()
	if !ok {
		return Spec{}, unknownBackend(fields[0])
	}
	sp := Spec{Base: fields[0]}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		part, name, ok := strings.Cut(f, "=")
		switch {
		case !ok || !slices.Contains(Parts, part):
			return Spec{}, fmt.Errorf("backend %q: %q is not PART=NAME with PART one of %s", spec, f, strings.Join(Parts, ", "))
		case seen[part]:
			return Spec{}, fmt.Errorf("backend %q: %s given twice", spec, part)
		case !slices.Contains(PartChoices(part), name):
			return Spec{}, fmt.Errorf("backend %q: unknown %s kernel %q (choose from: %s)", spec, part, name, strings.Join(PartChoices(part), ", "))
		}
		seen[part] = true
		sp.Swaps = append(sp.Swaps, Swap{part, name})
	}
	return sp, nil
}

// ParseBackend builds the backend a spec names (see ParseSpec for the
// grammar). The returned backend's Close releases everything the spec
// opened.
func ParseBackend(spec string) (*Backend, error) {
	sp, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	base, err := newBase(sp.Base)
	if err != nil {
		return nil, err
	}
	if len(sp.Swaps) == 0 {
		return base, nil
	}
	if base.NewRunner != nil {
		_ = base.Close()
		return nil, fmt.Errorf("backend %q: %s keeps the whole model on its device, so part swaps (which would copy activations off it) are not allowed; use it alone, or a CPU base such as chunked", spec, sp.Base)
	}
	be := *base
	be.Name = strings.TrimSpace(spec)
	releases := []func() error{base.Release}
	for _, sw := range sp.Swaps {
		k, release, err := partKernel(sw.Part, sw.Name)
		if err == nil {
			releases = append(releases, release)
			err = setPart(&be, sw.Part, k)
		}
		if err != nil {
			closeAll(releases)
			return nil, fmt.Errorf("backend %q: %w", spec, err)
		}
	}
	be.Release = func() error { return closeAll(releases) }
	return &be, nil
}

// NewBackend is ParseBackend: every command and test accepts the same
// grammar.
func NewBackend(spec string) (*Backend, error) { return ParseBackend(spec) }

func newBase(name string) (*Backend, error) {
	regMu.Lock()
	f, ok := registry[name]
	regMu.Unlock()
	if !ok {
		return nil, unknownBackend(name)
	}
	return f()
}

func unknownBackend(name string) error {
	msg := fmt.Sprintf("unknown backend %q (this build has: %s; see 'qwenref help backends')", name, strings.Join(BackendNames(), ", "))
	if strings.HasPrefix(name, "cuda") {
		msg += "; the CUDA backends are registered by importing github.com/qwenref/qwenref/cuda, as the qwenref command does"
	}
	return errors.New(msg)
}

// partKernel resolves NAME for one part: a variant first, then a backend.
func partKernel(part, name string) (any, func() error, error) {
	regMu.Lock()
	v, isVariant := variants[part][name]
	_, isBackend := registry[name]
	regMu.Unlock()
	switch {
	case isVariant:
		k, err := v.make()
		return k, nil, err
	case isBackend:
		b, err := newBase(name)
		if err != nil {
			return nil, nil, err
		}
		if b.NewRunner != nil {
			_ = b.Close()
			return nil, nil, fmt.Errorf("%s=%s: %s runs only as a whole-model backend; its kernels cannot be mixed into another base", part, name, name)
		}
		var k any
		switch part {
		case "matmul":
			k = b.MatMul
		case "conv":
			k = b.Conv
		case "delta":
			k = b.Delta
		case "attn":
			k = b.Attn
		case "moe":
			k = b.MoEKernel()
		}
		return k, b.Release, nil
	}
	return nil, nil, fmt.Errorf("unknown %s kernel %q (choose from: %s)", part, name, strings.Join(PartChoices(part), ", "))
}

func setPart(be *Backend, part string, k any) error {
	var ok bool
	switch part {
	case "matmul":
		be.MatMul, ok = k.(linalg.MatMuler)
	case "conv":
		be.Conv, ok = k.(conv1d.Kernel)
	case "delta":
		be.Delta, ok = k.(gateddelta.Kernel)
	case "attn":
		be.Attn, ok = k.(attention.Kernel)
	case "moe":
		be.MoE, ok = k.(moe.Kernel)
	}
	if !ok {
		return fmt.Errorf("%s kernel of type %T does not implement the %s interface", part, k, part)
	}
	return nil
}

func closeAll(fs []func() error) error {
	var errs []error
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i] != nil {
			errs = append(errs, fs[i]())
		}
	}
	return errors.Join(errs...)
}

// BackendNames lists the registered base backends, naive first.
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

// BackendHelp returns a one-line description of a base backend.
func BackendHelp(name string) string {
	regMu.Lock()
	defer regMu.Unlock()
	return regHelp[name]
}

// PartChoices lists what PART=NAME accepts for one part: the backends
// whose kernel for the part can be mixed in, then its kernel variants.
func PartChoices(part string) []string {
	out := BackendNames()
	regMu.Lock()
	var vs []string
	for n := range variants[part] {
		vs = append(vs, n)
	}
	regMu.Unlock()
	sort.Slice(vs, func(i, j int) bool { // recurrent first, then chunked16 < chunked32 < … by length
		oi, oj := order(vs[i]), order(vs[j])
		if len(oi) != len(oj) {
			return len(oi) < len(oj)
		}
		return oi < oj
	})
	for _, v := range vs {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// KernelHelp returns the description of a part's kernel variant.
func KernelHelp(part, name string) string {
	regMu.Lock()
	defer regMu.Unlock()
	if v, ok := variants[part][name]; ok {
		return v.help
	}
	return regHelp[name]
}

func order(n string) string {
	if i := slices.Index([]string{"naive", "chunked", "recurrent", "cuda", "cuda-fp32"}, n); i >= 0 {
		return string(rune('0' + i))
	}
	return "9" + n
}

func init() {
	RegisterBackend("naive", "per-position loops that mirror the equations (the readable truth)", func() (*Backend, error) {
		return &Backend{Name: "naive", MatMul: linalg.Naive{}, Conv: conv1d.Naive{}, Delta: gateddelta.Naive{}, Attn: attention.Naive{}, MoE: moe.Naive{}}, nil
	})
	RegisterBackend("chunked", "the fast CPU path, fp32 throughout (the default): packed SIMD GEMM, WY/UT chunked delta rule, streaming conv, tiled online-softmax attention", func() (*Backend, error) {
		return &Backend{Name: "chunked", MatMul: linalg.Blocked{}, Conv: conv1d.Chunked{}, Delta: gateddelta.Chunked{}, Attn: attention.Chunked{}, MoE: moe.Grouped{}}, nil
	})
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(RegisterKernel("delta", "recurrent", "the fused per-token recurrence (the decode kernel) run over every position", func() (any, error) {
		return gateddelta.Recurrent{}, nil
	}))
	for _, c := range []int{16, 32, 64, 128} {
		must(RegisterKernel("delta", fmt.Sprintf("chunked%d", c), fmt.Sprintf("WY/UT chunked delta rule with chunk length %d", c), func() (any, error) {
			return gateddelta.Chunked{ChunkSize: c}, nil
		}))
	}
	must(RegisterKernel("moe", "grouped", "mixture of experts: tokens grouped by expert, one GEMM per expert and projection", func() (any, error) {
		return moe.Grouped{}, nil
	}))
	must(RegisterKernel("matmul", "bf16", "bf16 compute: activations rounded to bf16, bf16 products summed in fp32 on AMX tiles or with AVX512_BF16 (QWENREF_BF16 picks), as ggml and PyTorch run bf16 checkpoints", newBF16MatMul))
}
