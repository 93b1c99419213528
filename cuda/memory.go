package cuda

import (
	"fmt"

	"github.com/qwenref/qwenref/model"
)

// EstimateMemory is the device memory, in bytes, a resident model of cfg's shape
// holds with KV caches for maxTokens positions after a prefill of
// prefillT tokens that asks for logitRows rows of logits. It mirrors the
// allocations of csrc/model.cu (DevModel::create, ensure_acts,
// ensure_logits), so a run can be refused before anything is uploaded.
func EstimateMemory(cfg *model.Config, maxTokens, prefillT, logitRows int) ModelMemory {
	return estimateMemory(cfg, false, maxTokens, prefillT, logitRows)
}

// EstimateMemoryFP32 is EstimateMemory for the fp32 resident model
// (cuda-fp32): matrices, activations, conv states and caches in fp32.
func EstimateMemoryFP32(cfg *model.Config, maxTokens, prefillT, logitRows int) ModelMemory {
	return estimateMemory(cfg, true, maxTokens, prefillT, logitRows)
}

func estimateMemory(cfg *model.Config, f32 bool, maxTokens, prefillT, logitRows int) ModelMemory {
	return estimateMemoryRows(cfg, f32, maxTokens, prefillT, logitRows, 1)
}

// estimateMemoryRows is estimateMemory with every state and cache in `rows`
// batch rows (DevModel::set_rows).
func estimateMemoryRows(cfg *model.Config, f32 bool, maxTokens, prefillT, logitRows, rows int) ModelMemory {
	R := int64(max(rows, 1))
	es := int64(2) // bytes of a matrix, activation or cache element
	if f32 {
		es = 4
	}
	H, I, V := int64(cfg.HiddenSize), int64(cfg.IntermediateSize), int64(cfg.VocabSize)
	nk, nv, dk, dv := int64(cfg.LinearNumKeyHeads), int64(cfg.LinearNumValueHeads), int64(cfg.LinearKeyHeadDim), int64(cfg.LinearValueHeadDim)
	kc := int64(cfg.LinearConvKernel)
	nh, nkv, hd := int64(cfg.NumHeads), int64(cfg.NumKVHeads), int64(cfg.HeadDim)
	cap := int64(maxTokens)
	C := 2*nk*dk + nv*dv
	NIN := C + nv*dv + 2*nv
	NQKV := nh*2*hd + 2*nkv*hd
	var m ModelMemory
	m.Weights = 2*V*H*es + H*4
	anyAttn := false
	mc := cfg.MoE
	E, IE, IS := int64(mc.NumExperts), int64(mc.IntermediateSize), int64(mc.SharedIntermediate)
	anyMoE := false
	for l, k := range cfg.LayerTypes {
		m.Weights += 2 * H * 4
		if cfg.SparseLayer(l) {
			anyMoE = true
			m.Weights += (E+8)/8*8*H*es + 3*IS*H*es + E*3*IE*H*es // the router padded to 8 rows (moe_router_rows)
		} else {
			m.Weights += 3 * I * H * es
		}
		if k == model.FullAttention {
			anyAttn = true
			m.Weights += NQKV*H*es + H*nh*hd*es + 2*hd*4
			m.State += R * 2 * cap * nkv * hd * es
		} else {
			m.Weights += (NIN*H+H*nv*dv)*es + (C*kc+2*nv+dv)*4
			m.State += R * (2*kc*C*es + nv*dk*dv*4)
		}
	}
	m.State += 4
	if anyAttn && !f32 { // the split-key decode attention's partials
		const decSplit = 64 // DEC_SPL of csrc/attn.cu
		m.State += R * nh * ((cap + decSplit - 1) / decSplit) * 258 * 4
	}
	T := int64(max(prefillT, 1))
	wbig := max(NQKV, 2*I)
	if anyMoE {
		wbig = max(wbig, 2*IS)
		if cfg.SparseLayers() == len(cfg.LayerTypes) {
			I = 0 // the device sizes the dense buffers by the dense layers alone
		}
		n := T * int64(mc.NumExpertsPerTok)
		m.Activations += T*((E+8)/8*8)*4 + n*6*4 + (3*E+2)*4 + n*IE*es + n*H*es + T*IS*es + T*H*4
		if f32 { // the gate/up products before SwiGLU, the router's sort queue
			m.Activations += n*2*IE*4 + T*E*8
		}
	}
	m.Activations += T * (4 + H*4 + H*es + wbig*es + I*es + nh*hd*2*es)
	const chunk = 64 // GDN_C of csrc/gdn.cu
	nc := (T + chunk - 1) / chunk
	m.Activations += T * (NIN*es + C*es + 2*nk*dk*es + 2*nv*4 + 2*nv*dv*es)
	if f32 {
		m.Activations += 16 // the recurrence needs no chunk scratch
	} else {
		m.Activations += nv * nc * (2*chunk*chunk*2 + chunk*4)
	}
	m.Activations += int64(max(logitRows, 1)) * V * 4
	return m
}

// Total is the sum of the parts.
func (m ModelMemory) Total() int64 { return m.Weights + m.State + m.Activations }

// String formats the parts in GiB.
func (m ModelMemory) String() string {
	g := func(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
	return fmt.Sprintf("%s (weights %s, caches and states %s, activations %s)", g(m.Total()), g(m.Weights), g(m.State), g(m.Activations))
}

// checkFits refuses a run that would not fit in the device's free memory,
// with the estimate; a margin of 512 MiB is left for cuBLAS workspaces and
// the CUDA context.
func (d *Device) checkFits(what string, need int64) error {
	free, total, err := d.MemInfo()
	if err != nil {
		return err
	}
	const margin = 512 << 20
	if need+margin > free {
		return fmt.Errorf("cuda: %s needs about %.2f GiB on %s, which has %.2f GiB free of %.2f GiB",
			what, float64(need)/(1<<30), d.Name(), float64(free)/(1<<30), float64(total)/(1<<30))
	}
	return nil
}
