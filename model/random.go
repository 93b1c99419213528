package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/qwenref/qwenref/tensor"
)

// RandomValues returns the deterministic synthetic values of the tensor
// `name` with the given shape, for seed. Each tensor has its own stream
// (seeded by the seed and the name), so tensors can be made in any order or
// in parallel, and a synthetic checkpoint on disk equals NewRandom's model.
//
// The distributions keep activations of order one at any width and make no
// stage an identity: linear weights N(0, 1/fan_in), embeddings N(0, 1),
// (1+w) norm weights U(−0.5, 0.5), the GDN norm scale U(0.5, 1.5),
// A_log = log U(0.05, 8), dt_bias U(−1, 1), conv taps N(0, 0.25).
func RandomValues(seed uint64, name string, shape []int) []float32 {
	out := make([]float32, tensor.NumElements(shape))
	NewRandomFiller(seed, name, shape).Fill(out)
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
func NewRandomFiller(seed uint64, name string, shape []int) *RandomFiller {
	h := fnv.New64a()
	h.Write([]byte(name))
	f := &RandomFiller{r: rand.New(rand.NewPCG(seed, h.Sum64())), kind: fillNormal, std: 0.1}
	switch {
	case strings.HasSuffix(name, "A_log"):
		f.kind = fillLogUniform
	case strings.HasSuffix(name, "dt_bias"):
		f.kind, f.std = fillUniform, -1 // U(−1, 1)
	case strings.HasSuffix(name, "linear_attn.norm.weight"):
		f.kind, f.std = fillUniform, 0.5 // U(0.5, 1.5)
	case strings.HasSuffix(name, "norm.weight"), strings.HasSuffix(name, "layernorm.weight"):
		f.kind, f.std = fillUniform, -0.5 // U(−0.5, 0.5)
	case strings.Contains(name, "conv1d"):
		f.std = 0.5
	case strings.Contains(name, "embed_tokens"):
		f.std = 1
	case len(shape) >= 2:
		f.std = 1 / math.Sqrt(float64(shape[len(shape)-1]))
	}
	return f
}

// Fill writes the next len(dst) values of the stream.
func (f *RandomFiller) Fill(dst []float32) {
	switch f.kind {
	case fillLogUniform: // A_log = log U(0.05, 8)
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
	seed   uint64
	bf16   bool
	shapes map[string][]int
}

func (r *randomSource) shape(name string) ([]int, error) {
	s, ok := r.shapes[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %s in this config", name)
	}
	return s, nil
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
	v := RandomValues(r.seed, name, s)
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
	src := &randomSource{seed: seed, bf16: bf16, shapes: map[string][]int{}}
	for _, e := range cfg.ExpectedTensors() {
		src.shapes[e.Name] = e.Shape
	}
	return build(cfg, src)
}
