package bench

import (
	"fmt"
	"math"
	"slices"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/model"
)

// caseHold is what one case of an op holds on the host beyond the
// weights, in bytes: the inputs every backend shares, what each instance
// keeps (its output and its own state; the reference's output stays too),
// and the working set of the one run going on at a time (the layer's
// buffers, its garbage, the products' scratch).
type caseHold struct {
	inputs, perInstance, work int64
	refOut                    int64 // the output a reference run leaves
	// paced: perInstance is a model estimate, which charges the collector's
	// room itself; else the kept parts get model.KeptHeadroom.
	paced bool
}

// f32s is n float32s in bytes, saturating (the sizes are checked below).
func f32s(n ...int) int64 {
	p := int64(4)
	for _, f := range n {
		if f != 0 && p > math.MaxInt64/8/int64(f) {
			return math.MaxInt64 / 8
		}
		p *= int64(f)
	}
	return p
}

// layerConfig is c cut to one block of kind (the block a layer op runs),
// without its MLP when mlp is false.
func layerConfig(c *model.Config, kind model.LayerKind, mlp bool) *model.Config {
	cc := *c
	cc.LayerTypes, cc.NumLayers = []model.LayerKind{kind}, 1
	if !mlp {
		cc.IntermediateSize = 0
		cc.MoE.NumExperts, cc.MoE.IntermediateSize, cc.MoE.SharedIntermediate = 0, 0, 0
	}
	return &cc
}

// blockWork is what model.EstimateMemory charges one block of kind at t
// tokens for its work (with or without its MLP), less the residual stream
// it charges a whole forward (the op's own input and output stand for it),
// and the block's state and caches, which each instance holds.
func blockWork(c *model.Config, kind model.LayerKind, t int, mlp bool) (work, state int64, err error) {
	est, err := model.EstimateMemory(layerConfig(c, kind, mlp), 1, t, 0)
	if err != nil {
		return 0, 0, err
	}
	return est.Activations - f32s(3, c.HiddenSize, t) + est.Scratch, est.States + est.Caches, nil
}

// holdOf sizes one case of op at t tokens with rows batch rows.
// states is how many layers' states op decode-core cycles through.
func holdOf(op *Op, c *model.Config, t, rows, states int) (caseHold, error) {
	h := c.HiddenSize
	x := f32s(t, h) // a layer op's input and its output, [T, H]
	switch op.Name {
	case "conv":
		ch, k := c.ConvDim(), c.LinearConvKernel
		return caseHold{inputs: f32s(t, ch) + f32s(k, ch), perInstance: f32s(t, ch) + f32s(k, ch), refOut: f32s(t, ch)}, nil
	case "gdn-core":
		d := c.GDNCoreDims(t)
		in := f32s(t, 2*d.NK*d.DK+d.NV*d.DV+2*d.NV)
		return caseHold{inputs: in, perInstance: f32s(t, d.NV, d.DV) + f32s(d.NV, d.DK, d.DV), refOut: f32s(t, d.NV, d.DV)}, nil
	case "decode-core":
		d := c.GDNCoreDims(1)
		st := f32s(d.NV, d.DK, d.DV)
		in := f32s(2*d.NK*d.DK+d.NV*d.DV+2*d.NV) + st // one token's q, k, v, g, β and a state
		n := int64(max(1, states))
		return caseHold{inputs: n * in, perInstance: n*st + 2*f32s(d.NV, d.DV), refOut: f32s(d.NV, d.DV)}, nil
	case "gemm":
		ch := c.ConvDim()
		return caseHold{inputs: x, perInstance: f32s(t, ch), refOut: f32s(t, ch), work: model.ProductScratch(t, h, ch)}, nil
	case "mlp":
		pooled := 2 * f32s(bufpool.Cap(t*c.IntermediateSize))
		return caseHold{inputs: x, perInstance: x, refOut: x, work: pooled + model.ProductScratch(t, max(h, c.IntermediateSize), 2*c.IntermediateSize)}, nil
	case "moe":
		w, _, err := blockWork(c, model.LinearAttention, t, true)
		if err != nil {
			return caseHold{}, err
		}
		m, _, err := blockWork(c, model.LinearAttention, t, false)
		return caseHold{inputs: x, perInstance: x, refOut: x, work: w - m + f32s(t, h)}, err // the block's MoE part; the shared expert's gate output
	case "gdn-layer", "attention-layer":
		w, st, err := blockWork(c, op.kinds[0], t, false)
		return caseHold{inputs: x, perInstance: x + st, refOut: x, work: w}, err
	case "decoder-layer", "decoder-layer-attn":
		w, st, err := blockWork(c, op.kinds[0], t, true)
		// each instance's x and its block buffers (normed, mix)
		return caseHold{inputs: x, perInstance: 3*x + st, refOut: x, work: w}, err
	}
	if op.wholeModel {
		est, err := model.EstimateMemory(c, rows, t, rows)
		out := est.Logits // the last logits (a copy of the first step's for decode)
		switch {
		case op.Name == "model" && rows == 1:
			// A recorded pass (the final norm is copied out), so every layer
			// allocates its buffers afresh, as forward's.
			est, err = model.EstimateFresh(c, rows, t, rows)
			out += f32s(t, h)
		case op.Name == "decode":
			// The caches grow by append to T + maxDecodeSteps + 1, 1.25×
			// at a time, the old array live while copied (as generation is
			// charged: model.CheckGenerationMemory).
			var full model.Memory
			full, err = model.EstimateMemory(c, rows, t+maxDecodeSteps+1, 0)
			est.Caches = full.Caches + full.Caches*5/4
		}
		if err != nil {
			return caseHold{}, err
		}
		ids := f32s(2, rows, t+1) // int is 8 bytes
		return caseHold{inputs: ids, perInstance: est.Total() + out, refOut: out, paced: true}, nil
	}
	return caseHold{}, fmt.Errorf("no memory estimate for op %s", op.Name)
}

// CaseMemory estimates what one case of op at T tokens and rows batch
// rows (states layers' states for op decode-core) holds on the host beyond the weights, with instances backend
// instances alive together (one per backend of the case) and, with
// reference, the naive reference's output, kept after its run while its
// instance is dropped: the inputs, each instance's output and state, and
// the working set of one run, and the collector's room on what is kept.
func CaseMemory(op *Op, c *model.Config, t, rows, states, instances int, reference bool) (int64, error) {
	hd, err := holdOf(op, c, t, rows, states)
	if err != nil {
		return 0, err
	}
	kept := hd.inputs + int64(instances)*hd.perInstance
	if reference {
		kept += hd.refOut
	}
	if !hd.paced {
		kept += model.KeptHeadroom(kept)
	}
	return kept + hd.work, nil
}

// checkCases refuses, before anything is built, a sweep whose case at
// some --seq would allocate more than --max-memory on the host.
// It returns the largest case's estimate.
func (o *Options) checkCases() (int64, error) {
	var most int64
	if o.MaxMemBytes <= 0 {
		return 0, nil
	}
	for _, op := range o.Ops {
		c := o.Config
		if op.wholeModel {
			if o.deviceWeights() {
				continue // the run lives on the device
			}
			c = o.modelConfig()
		}
		for _, rows := range o.rowsFor(op) {
			for _, t := range o.Seqs {
				n, ref := o.instances(op, c, t, rows)
				need, err := CaseMemory(op, c, t, rows, o.States, n, ref)
				if err != nil {
					return 0, fmt.Errorf("op %s --seq %d: %w", op.Name, t, err)
				}
				if need > o.MaxMemBytes {
					batch := ""
					if rows > 1 {
						batch = fmt.Sprintf(" with %d batch rows", rows)
					}
					return 0, fmt.Errorf("op %s at --seq %d%s needs about %s of activations and buffers beyond the weights, over the %.3g GiB limit (--max-memory): use a shorter --seq",
						op.Name, t, batch, memString(need), float64(o.MaxMemBytes)/(1<<30))
				}
				most = max(most, need)
			}
		}
	}
	return most, nil
}

// instances counts the instances a case keeps alive at once, one per
// backend that runs, and reports whether the naive reference runs apart
// from them (its output is kept, its instance dropped).
func (o *Options) instances(op *Op, c *model.Config, t, rows int) (int, bool) {
	naiveOK := op.FLOP(c, t)*float64(rows)/1e9 <= o.NaiveMaxGFLOP
	n := 0
	for _, b := range o.Backends {
		if b != "naive" || naiveOK {
			n++
		}
	}
	return n, naiveOK && !slices.Contains(o.Backends, "naive")
}

// memString gives n bytes as model.Memory's String gives a total: GiB
// with two decimals, MiB under 1 GiB.
func memString(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
