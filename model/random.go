package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// RandomValues returns the deterministic synthetic values of one tensor
// for seed. Each tensor has its own stream (seeded by the seed and the
// name), so tensors can be made in any order or in parallel, and a
// synthetic checkpoint on disk equals NewRandom's model.
//
// The distributions, by the init class of the tensor's tag, keep
// activations of order one at any width and make no stage an identity:
// linear weights N(0, 1/fan_in), embedding N(0, 1), zero_centred (1+w)
// norm weights U(−0.5, 0.5), unit_scale (the GDN norm) U(0.5, 1.5),
// log_decay (log A) log U(0.05, 8), softplus_offset (the time-step
// bias) U(−1, 1), conv taps N(0, 0.25);
// other vectors N(0, 0.01).
func RandomValues(seed uint64, spec TensorSpec) []float32 {
	out := make([]float32, tensor.NumElements(spec.Shape))
	NewRandomFiller(seed, spec).Fill(out)
	return out
}

// RandomFiller produces a tensor's synthetic values in order, a piece at a
// time, so a tensor larger than memory can be streamed to disk. Filling in
// pieces gives exactly the values RandomValues returns.
type RandomFiller struct {
	r    *rand.Rand
	kind int
	std  float64
}

const (
	fillNormal = iota
	fillUniform
	fillLogUniform
)

// NewRandomFiller starts the value stream of one tensor.
func NewRandomFiller(seed uint64, spec TensorSpec) *RandomFiller {
	h := fnv.New64a()
	h.Write([]byte(spec.Name))
	f := &RandomFiller{r: rand.New(rand.NewPCG(seed, h.Sum64())), kind: fillNormal, std: 0.1}
	switch spec.Init {
	case "log_decay":
		f.kind = fillLogUniform
	case "softplus_offset":
		f.kind, f.std = fillUniform, -1 // U(−1, 1)
	case "unit_scale":
		f.kind, f.std = fillUniform, 0.5 // U(0.5, 1.5)
	case "zero_centred":
		f.kind, f.std = fillUniform, -0.5 // U(−0.5, 0.5)
	case "conv":
		f.std = 0.5
	case "embedding":
		f.std = 1
	default:
		if len(spec.Shape) >= 2 {
			f.std = 1 / math.Sqrt(float64(spec.Shape[len(spec.Shape)-1]))
		}
	}
	return f
}

// Fill writes the next len(dst) values of the stream.
func (f *RandomFiller) Fill(dst []float32) {
	switch f.kind {
	case fillLogUniform: // log U(0.05, 8)
		for i := range dst {
			dst[i] = float32(math.Log(0.05 + 7.95*f.r.Float64()))
		}
	case fillUniform: // std < 0: U(std, −std); else U(std, std+1)
		lo, hi := f.std, -f.std
		if f.std > 0 {
			lo, hi = f.std, f.std+1
		}
		for i := range dst {
			dst[i] = float32(lo + (hi-lo)*f.r.Float64())
		}
	default:
		for i := range dst {
			dst[i] = float32(f.r.NormFloat64() * f.std)
		}
	}
}

// randomSource serves RandomValues as a tensorSource; matrices are stored
// in bf16 (rounded) when bf16 is set, as a bf16 checkpoint would hold them.
type randomSource struct {
	seed  uint64
	bf16  bool
	specs map[string]TensorSpec
}

func (r *randomSource) shape(name string) ([]int, error) {
	s, ok := r.specs[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %s in this config", name)
	}
	return s.Shape, nil
}

func (r *randomSource) Matrix(name string) (*tensor.Matrix, error) {
	s, err := r.shape(name)
	if err != nil {
		return nil, err
	}
	v := r.values(name, s)
	if r.bf16 {
		b := make([]uint16, len(v))
		for i, x := range v {
			b[i] = tensor.Float32ToBF16(x)
		}
		return tensor.NewMatrixBF16(s[0], s[1], b)
	}
	return tensor.NewMatrixF32(s[0], s[1], v)
}

func (r *randomSource) Float32(name string) ([]float32, []int, error) {
	s, err := r.shape(name)
	if err != nil {
		return nil, nil, err
	}
	return r.values(name, s), s, nil
}

// values are rounded through bf16 when the source is bf16, so vectors
// match what a bf16 synthetic checkpoint stores.
func (r *randomSource) values(name string, s []int) []float32 {
	v := RandomValues(r.seed, TensorSpec{Name: name, Shape: s, Init: r.specs[name].Init})
	if r.bf16 {
		for i, x := range v {
			v[i] = tensor.BF16ToFloat32(tensor.Float32ToBF16(x))
		}
	}
	return v
}

// NewRandom builds a model with deterministic random weights held in
// memory (bf16 matrices when bf16 is set). Mind the size: the 27B shape
// needs 54 GB in bf16; use a synthetic checkpoint on disk for it.
func NewRandom(cfg *Config, seed uint64, bf16 bool) (*Model, error) {
	src := &randomSource{seed: seed, bf16: bf16, specs: map[string]TensorSpec{}}
	for _, e := range cfg.ExpectedTensors() {
		src.specs[e.Name] = e
	}
	m, _, err := build(cfg, src, nil)
	return m, err
}

// RandomConvTaps are the conv taps [C, K] of the first Gated DeltaNet
// layer of NewRandom(cfg, seed, false), or nil when cfg has none.
func RandomConvTaps(cfg *Config, seed uint64) []float32 {
	m := skeleton(cfg, nil)
	for i := range m.Blocks {
		if g := m.Blocks[i].GDN(); g != nil {
			var taps []float32
			_ = walkTensors(m, func(f weights.Field) error {
				if f.Is(&g.W.ConvW) {
					taps = RandomValues(seed, TensorSpec{Name: f.Name, Shape: f.Shape, Init: f.Init})
				}
				return nil
			})
			return taps
		}
	}
	return nil
}
