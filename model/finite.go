package model

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/tensor"
)

// Non-finite weights policy: a NaN or Inf in any weight is an error, never a
// warning, because it poisons every logit downstream and a reference must
// not print numbers it cannot stand behind. The small tensors (norms, gates,
// conv taps) are always scanned at load, which costs nothing. The large
// matrices are scanned only on request (CheckFinite, `--check-weights`),
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

// checkSmallTensors scans every vector parameter for NaN/Inf.
func (m *Model) checkSmallTensors() error {
	check := func(name string, v []float32) error {
		if i := firstNonFinite(v); i >= 0 {
			return fmt.Errorf("weight %s has a non-finite value (%v at index %d)", name, v[i], i)
		}
		return nil
	}
	if err := check("norm.weight", m.FinalNorm); err != nil {
		return err
	}
	for i := range m.Blocks {
		b := &m.Blocks[i]
		p := fmt.Sprintf("layers.%d.", i)
		vs := map[string][]float32{p + "input_layernorm.weight": b.InputNorm, p + "post_attention_layernorm.weight": b.PostNorm}
		if b.GDN != nil {
			g := p + "linear_attn."
			vs[g+"A_log"], vs[g+"dt_bias"], vs[g+"norm.weight"], vs[g+"conv1d.weight"] = b.GDN.W.ALog, b.GDN.W.DtBias, b.GDN.W.NormW, b.GDN.W.ConvW
		}
		if b.Attn != nil {
			vs[p+"self_attn.q_norm.weight"], vs[p+"self_attn.k_norm.weight"] = b.Attn.W.QNorm, b.Attn.W.KNorm
		}
		for name, v := range vs {
			if err := check(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckFinite scans every weight matrix for NaN/Inf (this reads the whole
// checkpoint) and returns an error naming the first bad tensor.
// A checkpoint file truncated while mapped is an error naming the file.
func (m *Model) CheckFinite(progress func(done, total int64)) error {
	names := m.matrixNames()
	total, done := m.WeightBytes(), int64(0)
	return m.Guard(func() error {
		for _, x := range m.Matrices() {
			if x.BF16 != nil {
				for i, b := range x.BF16 {
					if b&0x7f80 == 0x7f80 { // exponent all ones: Inf or NaN
						return fmt.Errorf("weight %s has a non-finite value (%v at index %d)", names[x], tensor.BF16ToFloat32(b), i)
					}
				}
			} else if i := firstNonFinite(x.F32); i >= 0 {
				return fmt.Errorf("weight %s has a non-finite value (%v at index %d)", names[x], x.F32[i], i)
			}
			done += x.Bytes()
			if progress != nil {
				progress(done, total)
			}
		}
		return nil
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

// matrixNames maps each weight matrix to its checkpoint name, for errors.
func (m *Model) matrixNames() map[*tensor.Matrix]string {
	n := map[*tensor.Matrix]string{m.Embed: "embed_tokens.weight"}
	if m.LMHead != m.Embed {
		n[m.LMHead] = "lm_head.weight"
	}
	for i := range m.Blocks {
		b := &m.Blocks[i]
		p := fmt.Sprintf("layers.%d.", i)
		n[b.MLP.Gate], n[b.MLP.Up], n[b.MLP.Down] = p+"mlp.gate_proj.weight", p+"mlp.up_proj.weight", p+"mlp.down_proj.weight"
		if w := b.GDN; w != nil {
			g := p + "linear_attn."
			n[w.W.InProjQKV], n[w.W.InProjZ], n[w.W.InProjB] = g+"in_proj_qkv.weight", g+"in_proj_z.weight", g+"in_proj_b.weight"
			n[w.W.InProjA], n[w.W.OutProj] = g+"in_proj_a.weight", g+"out_proj.weight"
		}
		if w := b.Attn; w != nil {
			a := p + "self_attn."
			n[w.W.QProj], n[w.W.KProj], n[w.W.VProj], n[w.W.OProj] = a+"q_proj.weight", a+"k_proj.weight", a+"v_proj.weight", a+"o_proj.weight"
		}
	}
	return n
}
