package weights

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/qwenref/qwenref/tensor"
)

// nativeLE reports whether this machine is little-endian. Only then can the
// file's little-endian bytes be reinterpreted in place.
var nativeLE = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Matrix returns a 2-D tensor, or a 3-D one with a singleton middle axis
// (a conv's [C, 1, K] becomes [C, K]), as a tensor.Matrix:
//
//   - BF16 stays bf16 and, when the bytes are 2-byte aligned, aliases the
//     read-only mapping (zero-copy); otherwise it is copied.
//   - F32 aliases the mapping when 4-byte aligned, else is copied.
//   - F16 is widened to a new float32 slice.
//
// A zero-copy matrix is read-only memory: writing to it crashes the process,
// and it is invalid after Close. Other dtypes are an error.
func (s *Store) Matrix(name string) (*tensor.Matrix, error) {
	e, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	switch e.info.DType {
	case "BF16", "F32", "F16":
	default:
		return nil, e.errorf("dtype %s is not supported for a matrix (want BF16, F16 or F32)", e.info.DType)
	}
	rows, cols, err := matrixDims(e)
	if err != nil {
		return nil, err
	}
	b := e.bytes()
	m := &tensor.Matrix{Rows: rows, Cols: cols}
	if err := s.fill(m, e.info.DType, b); err != nil {
		return nil, err
	}
	return m, nil
}

// matrixDims accepts [R, C] and [R, 1, C].
func matrixDims(e *entry) (rows, cols int, err error) {
	sh := e.info.Shape
	switch {
	case len(sh) == 2:
		return sh[0], sh[1], nil
	case len(sh) == 3 && sh[1] == 1:
		return sh[0], sh[2], nil
	}
	return 0, 0, e.errorf("shape %v is not a matrix (want [rows, cols] or [rows, 1, cols]; use Float32 for other ranks)", sh)
}

// Float32 returns any tensor of dtype F32, BF16 or F16 widened into a new
// float32 slice (never aliasing the mapping), together with its shape. I64
// and I32 tensors (token ids) are read too, exactly for values below 2^24
// in magnitude; a larger one is an error.
func (s *Store) Float32(name string) ([]float32, []int, error) {
	e, err := s.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	b := e.bytes()
	var out []float32
	err = s.Guard(func() error {
		switch e.info.DType {
		case "F32":
			out = decodeF32(b)
		case "BF16":
			out = make([]float32, len(b)/2)
			for i := range out {
				out[i] = tensor.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
			}
		case "F16":
			out = decodeF16(b)
		case "I64", "I32":
			size := 8
			if e.info.DType == "I32" {
				size = 4
			}
			out = make([]float32, len(b)/size)
			for i := range out {
				v := int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
				if size == 8 {
					v = int64(binary.LittleEndian.Uint64(b[8*i:]))
				}
				if v > 1<<24 || v < -(1<<24) {
					return e.errorf("value %d at index %d is too large to read exactly as float32", v, i)
				}
				out[i] = float32(v)
			}
		default:
			return e.errorf("dtype %s cannot be read as float32 (want BF16, F16, F32, I64 or I32)", e.info.DType)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, slices.Clone(e.info.Shape), nil
}

// CheckNonFinite counts the NaN and ±Inf values of a floating-point tensor
// without copying it. Integer tensors have none; other dtypes are an error.
// Whether a count is fatal is the caller's decision.
func (s *Store) CheckNonFinite(name string) (int, error) {
	e, err := s.lookup(name)
	if err != nil {
		return 0, err
	}
	b := e.bytes()
	n := 0
	err = s.Guard(func() error {
		n, err = countNonFinite(e, b)
		return err
	})
	return n, err
}

// countNonFinite is CheckNonFinite's scan over the tensor's bytes.
func countNonFinite(e *entry, b []byte) (int, error) {
	n := 0
	switch e.info.DType {
	case "F32":
		for i := 0; i+4 <= len(b); i += 4 {
			if binary.LittleEndian.Uint32(b[i:])&0x7f800000 == 0x7f800000 {
				n++
			}
		}
	case "BF16":
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7f80 == 0x7f80 {
				n++
			}
		}
	case "F16":
		for i := 0; i+2 <= len(b); i += 2 {
			if binary.LittleEndian.Uint16(b[i:])&0x7c00 == 0x7c00 {
				n++
			}
		}
	case "F64":
		for i := 0; i+8 <= len(b); i += 8 {
			if binary.LittleEndian.Uint64(b[i:])&0x7ff0000000000000 == 0x7ff0000000000000 {
				n++
			}
		}
	case "BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64":
	default:
		return 0, e.errorf("dtype %s is not supported by CheckNonFinite", e.info.DType)
	}
	return n, nil
}

// errorf builds an error naming the tensor (canonical and stored) and file.
func (e *entry) errorf(format string, args ...any) error {
	return fmt.Errorf("weights: %s: tensor %s (stored as %s): %s",
		clean(e.info.File), quote(e.info.Name), quote(e.info.Stored), fmt.Sprintf(format, args...))
}

// viewUint16 reinterprets b as []uint16 in place when that is legal: the
// host is little-endian and b is 2-byte aligned. An empty b gives an empty,
// non-nil slice so a Matrix still has exactly one storage field set.
func viewUint16(b []byte) ([]uint16, bool) {
	if len(b) == 0 {
		return []uint16{}, true
	}
	if !nativeLE || uintptr(unsafe.Pointer(&b[0]))%2 != 0 {
		return nil, false
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), true
}

// viewFloat32 is viewUint16 for float32 and 4-byte alignment.
func viewFloat32(b []byte) ([]float32, bool) {
	if len(b) == 0 {
		return []float32{}, true
	}
	if !nativeLE || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), true
}

func copyUint16(b []byte) []uint16 {
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

func decodeF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func decodeF16(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = tensor.F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out
}

// fill points m at the tensor's bytes b: zero-copy views of bf16 and f32
// data where the mapping's alignment allows, else copies; f16 is widened to
// f32. The reads run under Guard, so a truncated mapping is an error.
func (s *Store) fill(m *tensor.Matrix, dtype string, b []byte) error {
	return s.Guard(func() error {
		switch dtype {
		case "BF16":
			if v, ok := viewUint16(b); ok {
				m.BF16 = v
			} else {
				m.BF16 = copyUint16(b)
			}
		case "F32":
			if v, ok := viewFloat32(b); ok {
				m.F32 = v
			} else {
				m.F32 = decodeF32(b)
			}
		case "F16":
			m.F32 = decodeF16(b)
		}
		return nil
	})
}
