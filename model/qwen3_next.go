package model

import (
	"fmt"
	"slices"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// qwen3Next is Qwen3-Next (Qwen3-Next-80B-A3B), where this architecture
// started: the MoE block in the layers decoder_sparse_step and
// mlp_only_layers choose, norm_topk_prob read from the config, and the
// GDN input projections stored fused (nextInProj).
var qwen3Next = &family{
	name:       "qwen3_next",
	modelTypes: []string{"qwen3_next"},
	prefixes:   qwenPrefixes,
	sparse:     true,
	parse: func(c *Config, t *rawText) error {
		if err := c.parseMoE(t); err != nil {
			return err
		}
		var k nextKeys
		if err := strictDecode(t.raw, &k); err != nil {
			return err
		}
		c.FusedGDNProjections = true
		c.MoE.NormTopKProb = deref(k.NormTopKProb, true)
		c.MoE.DecoderSparseStep = deref(k.DecoderSparseStep, 1)
		if len(k.MLPOnlyLayers) > MaxLayers {
			return fmt.Errorf("mlp_only_layers has %d entries: more than the %d layers allowed", len(k.MLPOnlyLayers), MaxLayers)
		}
		c.MoE.MLPOnlyLayers = slices.Clone(k.MLPOnlyLayers)
		return nil
	},
	sizes: func(c *Config, s weights.Sizes) { s["separate_in_proj"] = 0 },
	// The fused projections replace the GDN's four input projections,
	// which separate_in_proj = 0 already keeps out of the walk.
	stored: func(c *Config, b *Block) (any, []any) {
		if b.GDN() == nil {
			return nil, nil
		}
		return &nextInProj{}, nil
	},
	derive: func(c *Config, b *Block) error {
		if p, ok := b.Stored.(*nextInProj); ok {
			p.derive(c, &b.GDN().W)
		}
		return nil
	},
}

// nextKeys are the config keys only Qwen3-Next reads (transformers 5.17's
// qwen3_5_moe has none of them).
type nextKeys struct {
	NormTopKProb      *bool `json:"norm_topk_prob"`
	DecoderSparseStep *int  `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int `json:"mlp_only_layers"`
}

// nextInProj are Qwen3-Next's fused GDN input projections. With
// r = n_v/n_k, QKVZ holds per key head g the rows [q_g (d_k) | k_g (d_k) |
// v_g (r·d_v) | z_g (r·d_v)] and BA per key head [b_g (r) | a_g (r)], as
// transformers' fix_query_key_value_ordering splits them.
type nextInProj struct {
	QKVZ *tensor.Matrix `tensor:"linear_attn.in_proj_qkvz.weight" shape:"C+n_v*d_v,H"`
	BA   *tensor.Matrix `tensor:"linear_attn.in_proj_ba.weight" shape:"2*n_v,H"`
}

// derive gathers the fused rows into the flat projections the GDN layer
// reads (docs/spec.md §2.3): [all q | all k | all v], z, b and a; the conv
// weight is already in the flat order. The gathered matrices are copies
// (in the checkpoint's dtype), made once at load.
func (p *nextInProj) derive(cfg *Config, w *gateddelta.LayerWeights) {
	if p.QKVZ == nil || p.BA == nil {
		return
	}
	nk, nv, dk, dv := cfg.LinearNumKeyHeads, cfg.LinearNumValueHeads, cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	qkv, z, b, a := deinterleaveRows(nk, nv, dk, dv)
	w.InProjQKV = gatherRows(p.QKVZ, qkv)
	w.InProjZ = gatherRows(p.QKVZ, z)
	w.InProjB = gatherRows(p.BA, b)
	w.InProjA = gatherRows(p.BA, a)
}

// deinterleaveRows returns, for the fused layout, the source rows of the
// flat projections: qkv and z in QKVZ, b and a in BA.
func deinterleaveRows(nk, nv, dk, dv int) (qkv, z, b, a []int) {
	r := nv / nk
	block := 2*dk + 2*r*dv // one key head's rows in QKVZ
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
