package bench

import (
	"fmt"

	"github.com/qwenref/qwenref/model"
)

// caseBuffers is how many T × width float32 buffers a layer-op case holds
// besides the layer's own working set: its input (five for the GDN core:
// q, k, v, g, β), the reference's output and each backend's output.
const caseBuffers = 8

// CaseMemory estimates what one case of op at T tokens and rows batch
// rows allocates on the host beyond the weights: the run's activations,
// states and caches (model.EstimateMemory of the blocks the op runs) and
// the case's inputs and outputs.
func CaseMemory(op *Op, c *model.Config, t, rows int) (int64, error) {
	cc := *c
	if !op.wholeModel {
		cc.LayerTypes = op.kinds
		if len(op.kinds) == 0 { // the GDN core and conv run one GDN layer's kernels
			cc.LayerTypes = []model.LayerKind{model.LinearAttention}
		}
		cc.NumLayers = len(cc.LayerTypes)
	}
	est, err := model.EstimateMemory(&cc, rows, t, rows)
	if err != nil {
		return 0, err
	}
	w := max(c.HiddenSize, c.ConvDim(), c.LinearNumValueHeads*c.LinearValueHeadDim)
	io := int64(caseBuffers) * int64(rows) * int64(t) * int64(w) * 4
	if op.wholeModel {
		io = int64(rows) * int64(t) * 8 * 2 // the ids
	}
	return est.Total() + io, nil
}

// checkCases refuses, before anything is built, a sweep whose case at
// some --seq would allocate more than --max-memory on the host.
func (o *Options) checkCases() error {
	if o.MaxMemBytes <= 0 {
		return nil
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
				need, err := CaseMemory(op, c, t, rows)
				if err != nil {
					return fmt.Errorf("op %s --seq %d: %w", op.Name, t, err)
				}
				if need > o.MaxMemBytes {
					batch := ""
					if rows > 1 {
						batch = fmt.Sprintf(" with %d batch rows", rows)
					}
					return fmt.Errorf("op %s at --seq %d%s needs about %s of activations and buffers beyond the weights, over the %.3g GiB limit (--max-memory): use a shorter --seq",
						op.Name, t, batch, memString(need), float64(o.MaxMemBytes)/(1<<30))
				}
			}
		}
	}
	return nil
}

// memString gives n bytes as model.Memory's String gives a total: GiB
// with two decimals, MiB under 1 GiB.
func memString(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
