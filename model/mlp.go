package model

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/layers/act"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// MLP is the SwiGLU feed-forward block: W_down(SiLU(W_gate x) ⊙ W_up x);
// the tags name its tensors under `layers.N.mlp.`.
type MLP struct {
	Gate *tensor.Matrix `tensor:"gate_proj.weight" shape:"I,H"`
	Up   *tensor.Matrix `tensor:"up_proj.weight" shape:"I,H"`
	Down *tensor.Matrix `tensor:"down_proj.weight" shape:"H,I"`
}

// Forward maps x [T, H] to out [T, H].
func (m *MLP) Forward(out, x []float32, t int, mm linalg.MatMuler) error {
	buf := bufpool.New(true) // never recorded, written in full by the products
	defer buf.Release()
	a := buf.Get(t * m.Gate.Rows)
	if err := m.GateUp(a, x, t, mm); err != nil {
		return err
	}
	return m.DownProj(out, a, t, mm)
}

// GateUp writes a [T, I] = SiLU(x W_gateᵀ) ⊙ x W_upᵀ.
func (m *MLP) GateUp(a, x []float32, t int, mm linalg.MatMuler) error {
	u := bufpool.Get(t * m.Up.Rows)
	defer bufpool.Put(u)
	if err := mm.MatMulT(a, x, t, m.Gate); err != nil {
		return fmt.Errorf("mlp gate projection: %w", err)
	}
	if err := mm.MatMulT(u, x, t, m.Up); err != nil {
		return fmt.Errorf("mlp up projection: %w", err)
	}
	act.SiLUMul(a, a, u) // vectorised
	return nil
}

// DownProj writes out [T, H] = a W_downᵀ.
func (m *MLP) DownProj(out, a []float32, t int, mm linalg.MatMuler) error {
	if err := mm.MatMulT(out, a, t, m.Down); err != nil {
		return fmt.Errorf("mlp down projection: %w", err)
	}
	return nil
}
