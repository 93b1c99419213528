package model

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/linalg"
)

// Backend is one set of kernels for every op of the model. Swapping the
// backend swaps how each layer computes, never what it computes. A backend
// says what it is: its name, its kernels, the precision of its matrix
// products, and, on an accelerator, its Device.
type Backend struct {
	// Name is the spec the backend was built from, e.g. "chunked:delta=naive".
	Name   string
	MatMul linalg.MatMuler
	Conv   conv1d.Kernel
	Delta  gateddelta.Kernel
	Attn   attention.Kernel
	// MoE computes the routed experts of sparse layers (nil: moe.Grouped).
	MoE moe.Kernel
	// Precision is what the matrix products round their operands to
	// (PrecisionF32 when empty); error models (trace --compare) follow it.
	// A kernel reports its own with a Precision() Precision method; one
	// that does not has its backend's.
	Precision Precision
	// Device is the accelerator the backend runs on; nil on the CPU.
	Device *Device
	// Release frees backend resources (device memory); nil for CPU backends.
	Release func() error
}

// Precision names the rounding of a backend's matrix products.
type Precision string

// The precisions a backend can have.
const (
	// PrecisionF32 computes every product in float32.
	PrecisionF32 Precision = "f32"
	// PrecisionBF16 rounds the activations (and weights) of the products
	// to bf16 and accumulates in float32.
	PrecisionBF16 Precision = "bf16"
)

// Device is what a backend on an accelerator offers beyond its kernels.
// Every field but Name may be left out.
type Device struct {
	// Name names the device, e.g. the GPU's model.
	Name string
	// NewRunner, when set, runs the whole model itself (a device-resident
	// model: weights uploaded once, activations never leave the device);
	// model.NewRunner calls it instead of building CPU sessions. Such a
	// backend takes no part swaps.
	NewRunner func(m *Model, rows int) (Runner, error)
	// NewRandomRunner, when set, builds runners over a model whose weights
	// the device generates itself from a seed, so no host copy of them
	// exists (NewRandomRunner).
	NewRandomRunner RandomRunnerFunc
	// Time, when set, times one bench op on the device itself (inputs
	// resident there, device events around each run, no host copies). It
	// returns nil, nil for an op it does not time, and an UnsupportedShape
	// error, saying why, for a shape it cannot time.
	Time func(op string, cfg *Config, t int) (*DeviceTiming, error)
	// Ceiling is the device's practical peak, for bench's %ceil column.
	Ceiling Ceiling
	// Supports, when set, returns why the device cannot hold cfg's model
	// as it would (nil when it can), e.g. head dims its resident kernels
	// lack, so that the backend runs it another way.
	Supports func(cfg *Config) error
}

// DeviceTiming is one op timed on a device: the median, fastest and
// slowest of Runs timed runs.
type DeviceTiming struct {
	Median, Min, Max time.Duration
	Runs             int
	// ElemBytes is the size of the activations the timed run moves (2 for
	// bf16); 0 means float32, as the host op.
	ElemBytes int
}

// DeviceTimer is a Runner on a device that reports the device time of its
// last Forward (events around the device's work, no host copies); bench
// shows it beside the host time.
type DeviceTimer interface {
	LastDeviceTime() (time.Duration, bool)
}

// Ceiling is a device's practical peak rates.
type Ceiling struct {
	GFLOPS float64 // dense matrix products, GFLOP/s
	GBPS   float64 // device memory copy, GB/s
	// About says what the numbers are, e.g. "bf16 GEMM; H200, anchors".
	About string
}

// ErrUnsupportedShape matches (errors.Is) a kernel's or device's refusal
// of a shape, made by UnsupportedShape.
var ErrUnsupportedShape = errors.New("shape not supported")

// UnsupportedShape returns a refusal of a shape whose text is the reason
// alone and which matches ErrUnsupportedShape.
func UnsupportedShape(format string, a ...any) error {
	return &unsupportedShape{fmt.Sprintf(format, a...)}
}

type unsupportedShape struct{ reason string }

func (e *unsupportedShape) Error() string        { return e.reason }
func (e *unsupportedShape) Is(target error) bool { return target == ErrUnsupportedShape }

// Resident reports whether the backend keeps the whole model on its device
// (Device.NewRunner).
func (b *Backend) Resident() bool { return b.Device != nil && b.Device.NewRunner != nil }

// shapeChecker is implemented by a kernel that runs only some shapes.
type shapeChecker interface{ Supports(cfg *Config) error }

// Supports returns nil when every kernel of b, and its device, runs a
// model of cfg's shape as asked, or else the reasons, one line per part
// ("delta: ..."), so that a command can say why instead of falling back
// silently. A kernel refuses a shape with a Supports(cfg) error method.
func (b *Backend) Supports(cfg *Config) error {
	var errs []error
	if b.Device != nil && b.Device.Supports != nil {
		if err := b.Device.Supports(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	for i, k := range []any{b.MatMul, b.Conv, b.Delta, b.Attn, b.MoE} {
		if c, ok := k.(shapeChecker); ok {
			if err := c.Supports(cfg); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", Parts[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// precisioned is implemented by a kernel that reports its precision.
type precisioned interface{ Precision() Precision }

// kernelPrecision is k's own precision, or else def.
func kernelPrecision(k any, def Precision) Precision {
	if p, ok := k.(precisioned); ok {
		return p.Precision()
	}
	if def == "" {
		return PrecisionF32
	}
	return def
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
	help      string
	make      func() (any, error)
	precision Precision // of a kernel that does not report its own
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
	return registerKernel(part, name, help, PrecisionF32, make)
}

// registerKernel is RegisterKernel for a variant of the given precision.
func registerKernel(part, name, help string, precision Precision, make func() (any, error)) error {
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
	variants[part][name] = variant{help: help, make: make, precision: precision}
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
	declared := base.Precision // what kernels that do not report their own have
	if base.Precision == "" {  // unsaid: bf16 when a kernel says so
		base.Precision = PrecisionF32
		for _, k := range []any{base.MatMul, base.Conv, base.Delta, base.Attn, base.MoE} {
			if kernelPrecision(k, PrecisionF32) == PrecisionBF16 {
				base.Precision = PrecisionBF16
			}
		}
	}
	if len(sp.Swaps) == 0 {
		return base, nil
	}
	if base.Resident() {
		_ = base.Close()
		return nil, fmt.Errorf("backend %q: %s keeps the whole model on its device, so part swaps (which would copy activations off it) are not allowed; use it alone, or a CPU base such as chunked", spec, sp.Base)
	}
	be := *base
	be.Name = strings.TrimSpace(spec)
	// Each part has its kernel's precision; the backend is bf16 when any is.
	prec := map[string]Precision{}
	for i, k := range []any{be.MatMul, be.Conv, be.Delta, be.Attn, be.MoE} {
		prec[Parts[i]] = kernelPrecision(k, declared)
	}
	releases := []func() error{base.Release}
	for _, sw := range sp.Swaps {
		k, p, release, err := partKernel(sw.Part, sw.Name)
		if err == nil {
			releases = append(releases, release)
			err = setPart(&be, sw.Part, k)
			prec[sw.Part] = p
		}
		if err != nil {
			closeAll(releases)
			return nil, fmt.Errorf("backend %q: %w", spec, err)
		}
	}
	be.Precision = PrecisionF32
	for _, p := range prec {
		if p == PrecisionBF16 {
			be.Precision = PrecisionBF16
		}
	}
	be.Release = func() error { return closeAll(releases) }
	return &be, nil
}

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
// It returns the kernel, its precision and what releases it.
func partKernel(part, name string) (any, Precision, func() error, error) {
	regMu.Lock()
	v, isVariant := variants[part][name]
	_, isBackend := registry[name]
	regMu.Unlock()
	switch {
	case isVariant:
		k, err := v.make()
		return k, kernelPrecision(k, v.precision), nil, err
	case isBackend:
		b, err := newBase(name)
		if err != nil {
			return nil, "", nil, err
		}
		if b.Resident() {
			_ = b.Close()
			return nil, "", nil, fmt.Errorf("%s=%s: %s runs only as a whole-model backend; its kernels cannot be mixed into another base", part, name, name)
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
		return k, kernelPrecision(k, b.Precision), b.Release, nil
	}
	return nil, "", nil, fmt.Errorf("unknown %s kernel %q (choose from: %s)", part, name, strings.Join(PartChoices(part), ", "))
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
	RegisterBackend("chunked-bf16", "chunked with bf16 compute in every projection (chunked:matmul=bf16): the fastest bf16 kernel this CPU has (AMX, AVX512_BF16, else the fp32 widening product; QWENREF_BF16 picks), as PyTorch and ggml run bf16 checkpoints", func() (*Backend, error) {
		mm, err := newBF16MatMul()
		if err != nil {
			return nil, err
		}
		return &Backend{Name: "chunked-bf16", MatMul: mm.(linalg.MatMuler), Conv: conv1d.Chunked{}, Delta: gateddelta.Chunked{}, Attn: attention.Chunked{}, MoE: moe.Grouped{},
			Precision: bf16Precision()}, nil
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
	must(registerKernel("matmul", "bf16", "bf16 compute: activations rounded to bf16, bf16 products summed in fp32 on AMX tiles or with AVX512_BF16 (QWENREF_BF16 picks), as ggml and PyTorch run bf16 checkpoints",
		bf16Precision(), newBF16MatMul))
}
