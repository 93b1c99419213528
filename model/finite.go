package model

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// Non-finite weights policy: a NaN or Inf in any weight is an error, never a
// warning, because it poisons every logit downstream and a reference must
// not print numbers it cannot stand behind. The small tensors (norms, gates,
// conv taps) are always scanned at load, in its one walk (build), which
// costs nothing. The large matrices are scanned only on request
// (CheckFinite, `--check-weights`),
// since that reads the whole checkpoint; instead every forward pass checks
// its logits and fails, naming the position, if one is not finite.

// firstNonFinite returns the index of the first NaN/Inf, or −1.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return i
		}
	}
	return -1
}

// describe names a tensor as its checkpoint stores it, with its file.
func (m *Model) describe(name string) string {
	if m.store == nil {
		return name
	}
	if info, ok := m.store.Info(name); ok {
		return fmt.Sprintf("%s (in %s)", safeio.Clean(info.Stored), safeio.Clean(info.File))
	}
	return name
}

// CheckFinite scans every weight matrix for NaN/Inf (this reads the whole
// checkpoint) and returns an error naming the first bad tensor as stored.
// A checkpoint file truncated while mapped is an error naming the file.
func (m *Model) CheckFinite(progress func(done, total int64)) error {
	total, done := m.WeightBytes(), int64(0)
	return m.Guard(func() error {
		return walkTensors(m, func(f weights.Field) error {
			x := f.Matrix()
			if x == nil {
				return nil
			}
			if x.BF16 != nil {
				for i, b := range x.BF16 {
					if b&0x7f80 == 0x7f80 { // exponent all ones: Inf or NaN
						return fmt.Errorf("weight %s has a non-finite value (%v at index %d)", m.describe(f.Name), tensor.BF16ToFloat32(b), i)
					}
				}
			} else if i := firstNonFinite(x.F32); i >= 0 {
				return fmt.Errorf("weight %s has a non-finite value (%v at index %d)", m.describe(f.Name), x.F32[i], i)
			}
			done += x.Bytes()
			if progress != nil {
				progress(min(done, total), total)
			}
			return nil
		})
	})
}

// Guard runs fn, which reads the model's mapped weights on the calling
// goroutine, turning a fault on a mapped page (a checkpoint file truncated
// after Load) into an error naming the file instead of a fatal SIGBUS.
func (m *Model) Guard(fn func() error) error {
	if m.store == nil {
		return fn()
	}
	return m.store.Guard(fn)
}
