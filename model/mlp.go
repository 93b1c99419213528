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
	inter := m.Gate.Rows
	buf := bufpool.New(true) // never recorded, written in full by the products
	defer buf.Release()
	g := buf.Get(t * inter)
	u := buf.Get(t * inter)
	if err := mm.MatMulT(g, x, t, m.Gate); err != nil {
		return fmt.Errorf("mlp gate projection: %w", err)
	}
	if err := mm.MatMulT(u, x, t, m.Up); err != nil {
		return fmt.Errorf("mlp up projection: %w", err)
	}
	act.SiLUMul(g, g, u) // SiLU(W_gate x) ⊙ W_up x, vectorised
	if err := mm.MatMulT(out, g, t, m.Down); err != nil {
		return fmt.Errorf("mlp down projection: %w", err)
	}
	return nil
}
