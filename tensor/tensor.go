// Package tensor holds qwenref's small tensor types: a row-major float32
// Tensor for activations and a Matrix for weights that may stay in bf16.
//
// Nothing here is clever on purpose: data are plain slices, shapes are plain
// ints, and every constructor checks its dimensions at the boundary (the
// gonum habit), so kernels can index without re-checking.
package tensor

import (
	"fmt"
	"math"
)

// Tensor is a dense row-major float32 array. The last axis is contiguous.
type Tensor struct {
	Shape []int     // dimensions, outermost first
	Data  []float32 // prod(Shape) values, row-major
}

// New returns a zero-filled tensor of the given shape.
func New(shape ...int) *Tensor {
	n := NumElements(shape)
	return &Tensor{Shape: append([]int(nil), shape...), Data: make([]float32, n)}
}

// FromData wraps data (not copied) with a shape, checking that they agree.
func FromData(data []float32, shape ...int) (*Tensor, error) {
	if n := NumElements(shape); n != len(data) {
		return nil, fmt.Errorf("tensor: shape %v needs %d elements, got %d", shape, n, len(data))
	}
	return &Tensor{Shape: append([]int(nil), shape...), Data: data}, nil
}

// NumElements is the product of the dimensions (1 for a scalar shape).
// It panics on a negative dimension, which is always a programming error.
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in %v", shape))
		}
		n *= d
	}
	return n
}

// Len returns the number of elements.
func (t *Tensor) Len() int { return len(t.Data) }

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: append([]int(nil), t.Shape...), Data: append([]float32(nil), t.Data...)}
}

// Reshape returns a view with a new shape over the same data.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	return FromData(t.Data, shape...)
}

// String prints the shape and the first few values, for traces and errors.
func (t *Tensor) String() string {
	const show = 6
	n := min(show, len(t.Data))
	s := fmt.Sprintf("%v %v", t.Shape, t.Data[:n])
	if len(t.Data) > show {
		s = s[:len(s)-1] + " …]"
	}
	return s
}

// RelL2 returns ‖got−want‖₂ / ‖want‖₂ in float64. If want is all zeros it
// returns ‖got‖₂, so a zero reference still yields a meaningful error.
// Mismatched lengths or non-finite values give +Inf, so a comparison fails.
func RelL2(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if math.IsNaN(num) || math.IsInf(num, 0) {
		return math.Inf(1)
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// MaxAbsDiff returns max_i |got_i − want_i|, or +Inf on a length mismatch or
// a non-finite difference.
func MaxAbsDiff(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = max(m, d)
	}
	return m
}

// Recorder receives named intermediate results (a copy is the receiver's
// job). Layers call it at each stage so goldens, `qwenref trace` and
// kernel debugging can see inside; a nil Recorder costs nothing.
type Recorder func(stage string, t *Tensor)

// Record calls r with a tensor view of data, if r is not nil.
func (r Recorder) Record(stage string, data []float32, shape ...int) {
	if r == nil {
		return
	}
	t, err := FromData(data, shape...)
	if err != nil {
		panic(fmt.Sprintf("tensor: recording %s: %v", stage, err)) // a caller bug, never input-driven
	}
	r(stage, t)
}

// Argmax returns the index of the largest value, the lowest one on ties, as
// torch.argmax does for finite values; NaN is never chosen (all NaN: 0).
// Greedy decoding and the backends' agreement count both use it.
func Argmax(x []float32) int {
	best, bv := 0, float32(math.Inf(-1))
	for i, v := range x {
		if v > bv {
			best, bv = i, v
		}
	}
	return best
}
