package bench

// The whole-model ops' instances: prefill, decode (with its states), the
// decode core over many layers' states, and the GEMM.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
)

// randomIDs draws n token ids for one case.
func randomIDs(c *model.Config, seed uint64, op string, n int) []int {
	r := inputRNG(seed, op, n)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(c.VocabSize)
	}
	return ids
}

// batchIDs draws n token ids for each of B rows; row 0's are randomIDs(op).
func batchIDs(c *model.Config, seed uint64, op string, n, rows int) [][]int {
	out := [][]int{randomIDs(c, seed, op, n)}
	for r := 1; r < rows; r++ {
		out = append(out, randomIDs(c, seed, fmt.Sprintf("%s/row%d", op, r), n))
	}
	return out
}

// prepareModel runs a prefill of T random token ids on a fresh Runner
// (the device-resident model on such a backend) and keeps the final
// hidden states [T, H] and the last logits for comparison.
func prepareModel(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	if ws.m == nil && !ws.deviceWeights {
		return nil, fmt.Errorf("no model built")
	}
	ids := batchIDs(ws.cfg, seed, "model", t, max(ws.rows, 1))
	return func(be *model.Backend) instance {
		return &modelInst{be: be, m: ws.m, ws: ws, ids: ids}
	}, nil
}

type modelInst struct {
	be     *model.Backend
	m      *model.Model // nil: the backend generates the weights (ws.deviceWeights)
	ws     *workspace
	runner model.Runner
	ids    [][]int
	out    []float32
	err    error
}

func (r *modelInst) open() error {
	if r.runner == nil && r.err == nil {
		if r.m == nil {
			r.runner, r.err = model.NewRandomRunner(r.be, r.ws.cfg, r.ws.seed, max(r.ws.rows, 1))
		} else {
			r.runner, r.err = model.NewRunner(r.m, r.be, max(r.ws.rows, 1))
		}
	}
	return r.err
}

// Close frees the runner (a device model's memory) after the case.
func (r *modelInst) Close() error {
	if r.runner == nil {
		return nil
	}
	err := r.runner.Close()
	r.runner = nil
	return err
}

func (r *modelInst) reset() {
	if r.open() == nil {
		r.err = r.runner.Reset()
	}
}
func (r *modelInst) output() []float32 { return r.out }

// deviceTime is the last run's time on the device, when the runner is
// device-resident and reports it (the cuda runner's CUDA events).
func (r *modelInst) deviceTime() (time.Duration, bool) {
	if dt, ok := r.runner.(model.DeviceTimer); ok {
		return dt.LastDeviceTime()
	}
	return 0, false
}
func (r *modelInst) run() error {
	if err := r.open(); err != nil {
		return err
	}
	var hidden []float32
	var rec tensor.Recorder = func(stage string, x *tensor.Tensor) {
		if stage == "final_norm" {
			hidden = append(r.out[:0], x.Data...)
		}
	}
	if r.be.Resident() || len(r.ids) > 1 {
		rec = nil // a device-resident runner copies every stage off the device when recording, and batch rows record nothing: compare logits only
	}
	logits, err := r.runner.Forward(r.ids, model.RunOptions{Logits: model.LastLogits, Record: rec})
	if err != nil {
		return err
	}
	r.out = append(hidden, logits.Data...)
	return nil
}

// prepareDecode times one decode step at position T: reset (untimed)
// empties the caches and prefills T random tokens, run feeds one more.
func prepareDecode(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	if ws.m == nil && !ws.deviceWeights {
		return nil, fmt.Errorf("no model built")
	}
	ids := batchIDs(ws.cfg, seed, "decode", t+1, max(ws.rows, 1))
	var prompt, next [][]int
	for _, row := range ids {
		prompt, next = append(prompt, row[:t]), append(next, row[t:])
	}
	return func(be *model.Backend) instance {
		return &decodeInst{modelInst: modelInst{be: be, m: ws.m, ws: ws}, prompt: prompt, next: next}
	}, nil
}

type decodeInst struct {
	modelInst
	prompt [][]int        // each batch row's T tokens
	next   [][]int        // each row's one token a step
	steps  int            // decode steps since the last prefill (-1: none yet)
	first  []float32      // logits of the first step after the prefill
	out    *tensor.Tensor // every step's logits, one buffer as in generation
}

// maxDecodeSteps bounds how far the timed steps run past position T
// before reset prefills again (at T = 2048, 3% further on).
const maxDecodeSteps = 64

// reset prefills the prompt when no prefill is in place or the steps have
// run maxDecodeSteps past it; otherwise the next run is the next step, as
// in generation (caches warm, graph captured), at a position up to
// maxDecodeSteps past T.
func (r *decodeInst) reset() {
	if r.open() != nil {
		return
	}
	if r.err == nil && r.first != nil && r.steps < maxDecodeSteps {
		return
	}
	r.steps, r.first = 0, nil
	if r.err = r.runner.Reset(); r.err == nil {
		_, r.err = r.runner.Forward(r.prompt, model.RunOptions{Logits: model.NoLogits})
	}
}

// output is the first step's logits (at position T), so every backend and
// every rerun compares the same thing however many steps were timed.
func (r *decodeInst) output() []float32 { return r.first }

func (r *decodeInst) run() error {
	if err := r.open(); err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	logits, err := r.runner.Forward(r.next, model.RunOptions{Logits: model.LastLogits, Out: r.out})
	if err != nil {
		return err
	}
	r.out = logits
	if r.first == nil {
		r.first = slices.Clone(logits.Data)
	}
	r.steps++
	return nil
}

// prepareDecodeCore times one token of the core, the way a model's decode
// step runs 48 of them: each run uses the next of ws.states layers' states
// (each with its own inputs), so a state is cold when it comes round again.
func prepareDecodeCore(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	c := ws.cfg
	d := c.GDNCoreDims(1)
	n := max(1, ws.states)
	ins := make([]*reference.GDNInputs, n)
	for i := range ins {
		in, err := reference.NewGDNInputs(caseSeed(seed, fmt.Sprintf("decode-core/%d", i), t), d, reference.GDNOptions{WithState: true})
		if err != nil {
			return nil, err
		}
		ins[i] = in
	}
	return func(be *model.Backend) instance {
		di := &decodeCoreInst{be: be, ins: ins, out: make([]float32, d.NV*d.DV), states: make([][]float32, n)}
		for i, in := range ins {
			di.states[i] = slices.Clone(in.State)
		}
		return di
	}, nil
}

type decodeCoreInst struct {
	be     *model.Backend
	ins    []*reference.GDNInputs
	states [][]float32
	out    []float32
	first  []float32 // the first run's output
	next   int
}

// reset is empty: each state advances one token per run, as in decoding.
func (r *decodeCoreInst) reset() {}

// output is the first run's output: every backend's first step is the same
// work (state 0, one token), while later steps depend on how many runs a
// backend got, and naive's reference runs once.
func (r *decodeCoreInst) output() []float32 { return r.first }
func (r *decodeCoreInst) run() error {
	if r.first == nil {
		defer func() { r.first = slices.Clone(r.out) }()
	}
	i := r.next % len(r.ins)
	r.next++
	in := r.ins[i]
	return r.be.Delta.Forward(r.out, in.Q, in.K, in.V, in.G, in.Beta, in.Dims, r.states[i])
}

// prepareGEMM times the GDN qkv projection of layer 0 as a plain product.
func prepareGEMM(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	blk := ws.block(model.LinearAttention)
	if blk == nil {
		return nil, fmt.Errorf("the model has no linear-attention layer")
	}
	w := blk.GDN().W.InProjQKV
	x := hiddenInput(seed, "gemm", t, w.Cols)
	return func(be *model.Backend) instance {
		return &gemmInst{be: be, w: w, x: x, t: t, y: make([]float32, t*w.Rows)}
	}, nil
}

type gemmInst struct {
	be   *model.Backend
	w    *tensor.Matrix
	x, y []float32
	t    int
}

func (r *gemmInst) reset()            {}
func (r *gemmInst) output() []float32 { return r.y }
func (r *gemmInst) run() error        { return r.be.MatMul.MatMulT(r.y, r.x, r.t, r.w) }

// applicableOps drops the ops a config has no block for: moe on a dense
// model, mlp where the first GDN layer is a mixture of experts (so the
// default "layers" sweep works on both kinds). It is an error when
// nothing is left.
func applicableOps(list []*Op, c *model.Config) ([]*Op, error) {
	sparse := firstSparse(c)
	var out, dropped []*Op
	for _, o := range list {
		if (o.Name == "moe" && !sparse) || (o.Name == "mlp" && sparse) {
			dropped = append(dropped, o)
			continue
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		var names []string
		for _, o := range dropped {
			names = append(names, o.Name)
		}
		return nil, fmt.Errorf("op %s: this model has no such block (moe needs a mixture-of-experts model, mlp a dense one)", strings.Join(names, ", "))
	}
	return out, nil
}

// firstSparse reports whether the first GDN layer (the block the layer
// ops run) is a mixture-of-experts block.
func firstSparse(c *model.Config) bool {
	for i, k := range c.LayerTypes {
		if k == model.LinearAttention {
			return c.SparseLayer(i)
		}
	}
	return false
}
