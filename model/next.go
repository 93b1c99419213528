package model

import (
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// fusedProjections maps Qwen3-Next's in_proj_qkvz and in_proj_ba onto the
// flat GDN projections (docs/spec.md §2.3, docs/moe.md). With r = n_v/n_k,
// in_proj_qkvz holds per key head g the rows [q_g (d_k) | k_g (d_k) |
// v_g (r·d_v) | z_g (r·d_v)] and in_proj_ba per key head [b_g (r) | a_g (r)],
// as transformers' fix_query_key_value_ordering splits them. Gathering
// those rows gives in_proj_qkv [all q | all k | all v], in_proj_z, in_proj_b
// and in_proj_a; the conv weight is already in the flat order. The gathered
// matrices are copies (in the checkpoint's dtype), made once at load.
func (l *loader) fusedProjections(cfg *Config, g string, w *gateddelta.LayerWeights) {
	qkvz := l.matrix(g + "in_proj_qkvz.weight")
	ba := l.matrix(g + "in_proj_ba.weight")
	if qkvz == nil || ba == nil {
		return
	}
	nk, nv, dk, dv := cfg.LinearNumKeyHeads, cfg.LinearNumValueHeads, cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	qkv, z, b, a := deinterleaveRows(nk, nv, dk, dv)
	w.InProjQKV = gatherRows(qkvz, qkv)
	w.InProjZ = gatherRows(qkvz, z)
	w.InProjB = gatherRows(ba, b)
	w.InProjA = gatherRows(ba, a)
}

// deinterleaveRows returns, for the fused layout, the source rows of the
// flat in_proj_qkv, in_proj_z (in in_proj_qkvz) and in_proj_b, in_proj_a
// (in in_proj_ba).
func deinterleaveRows(nk, nv, dk, dv int) (qkv, z, b, a []int) {
	r := nv / nk
	block := 2*dk + 2*r*dv // one key head's rows in in_proj_qkvz
	var q, k, v []int
	for g := range nk {
		base := g * block
		for i := range dk {
			q = append(q, base+i)
			k = append(k, base+dk+i)
		}
		for i := range r * dv {
			v = append(v, base+2*dk+i)
			z = append(z, base+2*dk+r*dv+i)
		}
		for i := range r {
			b = append(b, g*2*r+i)
			a = append(a, g*2*r+r+i)
		}
	}
	qkv = append(append(q, k...), v...)
	return qkv, z, b, a
}

// gatherRows copies the given rows of m into a new matrix of m's dtype.
func gatherRows(m *tensor.Matrix, rows []int) *tensor.Matrix {
	out := &tensor.Matrix{Rows: len(rows), Cols: m.Cols}
	c := m.Cols
	if m.BF16 != nil {
		out.BF16 = make([]uint16, len(rows)*c)
		for i, r := range rows {
			copy(out.BF16[i*c:(i+1)*c], m.BF16[r*c:(r+1)*c])
		}
		return out
	}
	out.F32 = make([]float32, len(rows)*c)
	for i, r := range rows {
		copy(out.F32[i*c:(i+1)*c], m.F32[r*c:(r+1)*c])
	}
	return out
}
