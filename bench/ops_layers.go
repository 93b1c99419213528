package bench

// The layer ops' instances: conv, GDN core, the mixers, MLP, MoE and one
// decoder block, each on its case's inputs.

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
)

func prepareConv(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	c := ws.cfg
	ch, k := c.ConvDim(), c.LinearConvKernel
	if ch > 0 && t > maxConvInputs/ch { // the input generator's limit, named here
		return nil, fmt.Errorf("T·C = %d·%d conv inputs is over the limit of %d values: at this width T is at most %d (see docs/limits.md)",
			t, ch, maxConvInputs, maxConvInputs/ch)
	}
	in, err := reference.NewConvInputs(caseSeed(seed, "conv", t), t, ch, k, false)
	if err != nil {
		return nil, err
	}
	// The taps of the first GDN layer as a random model holds them.
	w := model.RandomConvTaps(c, seed)
	return func(be *model.Backend) instance {
		return &convInst{be: be, x: in.X, w: w, t: t, c: ch, k: k, y: make([]float32, t*ch), state: make([]float32, k*ch)}
	}, nil
}

// maxConvInputs is the most values reference.NewConvInputs draws for x.
const maxConvInputs = math.MaxInt32

type convInst struct {
	be       *model.Backend
	x, w     []float32
	t, c, k  int
	y, state []float32
}

func (r *convInst) reset()            { clear(r.state) }
func (r *convInst) output() []float32 { return r.y }
func (r *convInst) run() error {
	return r.be.Conv.Forward(r.y, r.x, r.w, conv1d.Dims{T: r.t, C: r.c, K: r.k}, r.state)
}

// prepareCore draws core inputs that obey the core's contract
// (reference.NewGDNInputs), one sequence from a zero state.
func prepareCore(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	c := ws.cfg
	d := c.GDNCoreDims(t)
	in, err := reference.NewGDNInputs(caseSeed(seed, "gdn-core", t), d, reference.GDNOptions{})
	if err != nil {
		return nil, err
	}
	return func(be *model.Backend) instance {
		return &coreInst{be: be, q: in.Q, k: in.K, v: in.V, g: in.G, beta: in.Beta, d: d,
			out: make([]float32, t*d.NV*d.DV), state: make([]float32, d.NV*d.DK*d.DV)}
	}, nil
}

type coreInst struct {
	be               *model.Backend
	q, k, v, g, beta []float32
	d                gateddelta.Dims
	out, state       []float32
}

func (r *coreInst) reset()            { clear(r.state) }
func (r *coreInst) output() []float32 { return r.out }
func (r *coreInst) run() error {
	return r.be.Delta.Forward(r.out, r.q, r.k, r.v, r.g, r.beta, r.d, r.state)
}

// hiddenInput draws x [T, H] with RMS about one, like a normed layer input.
func hiddenInput(seed uint64, op string, t, h int) []float32 {
	return reference.Normals(inputRNG(seed, op, t), t*h, 1)
}

// mixer runs one block's token mixer (model.Block.Mix) with fresh state
// per run.
type mixer struct {
	be  *model.Backend
	blk *model.Block
	st  *model.BlockState
}

func newMixer(be *model.Backend, blk *model.Block) *mixer {
	return &mixer{be: be, blk: blk, st: blk.NewState()}
}

func (m *mixer) reset() { m.st.Reset() }

func (m *mixer) forward(out, x []float32, t int) error {
	return m.blk.Mix(out, x, t, m.st, m.be, nil)
}

func prepareMixer(kind model.LayerKind) func(*workspace, int, uint64) (func(*model.Backend) instance, error) {
	return func(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
		blk := ws.block(kind)
		if blk == nil {
			return nil, fmt.Errorf("the model has no %s layer", kind)
		}
		h := ws.cfg.HiddenSize
		x := hiddenInput(seed, "mixer", t, h)
		return func(be *model.Backend) instance {
			return &mixerInst{mx: newMixer(be, blk), x: x, t: t, out: make([]float32, t*h)}
		}, nil
	}
}

type mixerInst struct {
	mx     *mixer
	x, out []float32
	t      int
}

func (r *mixerInst) reset()            { r.mx.reset() }
func (r *mixerInst) output() []float32 { return r.out }
func (r *mixerInst) run() error        { return r.mx.forward(r.out, r.x, r.t) }

func prepareMLP(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	blk := ws.block(model.LinearAttention)
	if blk == nil {
		return nil, fmt.Errorf("the model has no decoder layer")
	}
	if blk.MoE != nil {
		return nil, fmt.Errorf("the model's first GDN layer has a mixture-of-experts block, not a dense MLP: use the moe op")
	}
	h := ws.cfg.HiddenSize
	x := hiddenInput(seed, "mlp", t, h)
	return func(be *model.Backend) instance {
		return &mlpInst{be: be, mlp: blk.MLP, x: x, t: t, out: make([]float32, t*h)}
	}, nil
}

type mlpInst struct {
	be     *model.Backend
	mlp    *model.MLP
	x, out []float32
	t      int
}

func (r *mlpInst) reset()            {}
func (r *mlpInst) output() []float32 { return r.out }
func (r *mlpInst) run() error        { return r.mlp.Forward(r.out, r.x, r.t, r.be.MatMul) }

// prepareMoE runs the first GDN layer's sparse MoE block (Block.MoE) on
// the backend's MoE kernel and matrix product.
func prepareMoE(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	blk := ws.block(model.LinearAttention)
	if blk == nil || blk.MoE == nil {
		return nil, fmt.Errorf("the model's first GDN layer has no mixture-of-experts block (use a MoE shape such as 35b-a3b)")
	}
	h := ws.cfg.HiddenSize
	x := hiddenInput(seed, "moe", t, h)
	return func(be *model.Backend) instance {
		return &moeInst{be: be, blk: blk, x: x, t: t, out: make([]float32, t*h)}
	}, nil
}

type moeInst struct {
	be     *model.Backend
	blk    *model.Block
	x, out []float32
	t      int
}

func (r *moeInst) reset()            {}
func (r *moeInst) output() []float32 { return r.out }
func (r *moeInst) run() error {
	return r.blk.MoE.Forward(r.out, r.x, r.t, r.be.MoEKernel(), r.be.MatMul, nil)
}

// prepareDecoder runs one whole decoder block, the model's own
// (model.Block.Forward), on a fresh state per run.
func prepareDecoder(kind model.LayerKind) func(*workspace, int, uint64) (func(*model.Backend) instance, error) {
	return func(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
		blk := ws.block(kind)
		if blk == nil {
			return nil, fmt.Errorf("the model has no %s layer", kind)
		}
		h := ws.cfg.HiddenSize
		x := hiddenInput(seed, "decoder", t, h)
		eps := float32(ws.cfg.RMSNormEps)
		return func(be *model.Backend) instance {
			return &decoderInst{be: be, blk: blk, st: blk.NewState(), eps: eps, x0: x, t: t, x: make([]float32, t*h)}
		}, nil
	}
}

type decoderInst struct {
	be    *model.Backend
	blk   *model.Block
	st    *model.BlockState
	buf   model.BlockBuffers
	eps   float32
	x0, x []float32
	t     int
}

func (r *decoderInst) reset() {
	r.st.Reset()
	copy(r.x, r.x0)
}
func (r *decoderInst) output() []float32 { return r.x }
func (r *decoderInst) run() error {
	return r.blk.Forward(r.x, r.t, r.eps, r.st, r.be, &r.buf, nil)
}
