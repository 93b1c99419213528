package bench

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/layers/norm"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// Op is one benchmarked operation: what it runs, what it needs built and
// how much work it is.
type Op struct {
	Name  string
	About string
	// FLOPFormula names the count used for GFLOP/s, for headers and docs.
	FLOPFormula string
	// FLOP counts the work of one call on T tokens (see FLOPFormula).
	FLOP func(c *model.Config, t int) float64
	// Bytes, if set, marks the op memory-bound: GB/s is reported from the
	// bytes one call must move at least.
	Bytes func(c *model.Config, t int) float64

	// kinds are the decoder blocks the op runs (nil: no weights needed).
	kinds []model.LayerKind
	// prepare makes the shared inputs of one case and returns a maker of
	// per-backend instances over them.
	prepare func(ws *workspace, t int, seed uint64) (func(be *model.Backend) instance, error)
}

// instance is one op on one backend with its own outputs and state.
type instance interface {
	// reset restores the state so the next run computes the same thing;
	// it is not timed.
	reset()
	// run is the timed work.
	run() error
	// output is what run computed, for the comparison with naive.
	output() []float32
}

// workspace holds what the ops of a sweep share: the config and, for ops
// with weights, a model whose blocks they run.
type workspace struct {
	cfg  *model.Config
	m    *model.Model // nil when no op needs weights
	gdn  *model.Block // first linear-attention block
	attn *model.Block // first full-attention block
}

func (ws *workspace) block(k model.LayerKind) *model.Block {
	if k == model.FullAttention {
		return ws.attn
	}
	return ws.gdn
}

// Per-token FLOP of the pieces, in the anchors' conventions: a projection
// is 2·in·out, the GDN core 7·d_k·d_v per value head (recurrent count), the
// causal conv 2·K per channel; norms, gates and activations are not counted.
func gdnProjFLOP(c *model.Config) float64 {
	h, nv, dv := float64(c.HiddenSize), float64(c.LinearNumValueHeads), float64(c.LinearValueHeadDim)
	return 2*h*(float64(c.ConvDim())+nv*dv+2*nv) + 2*nv*dv*h
}

func convFLOP(c *model.Config) float64 { return 2 * float64(c.LinearConvKernel*c.ConvDim()) }

func coreFLOP(c *model.Config) float64 {
	return 7 * float64(c.LinearKeyHeadDim*c.LinearValueHeadDim*c.LinearNumValueHeads)
}

func gdnLayerFLOP(c *model.Config, t int) float64 {
	return float64(t) * (gdnProjFLOP(c) + convFLOP(c) + coreFLOP(c))
}

// attnLayerFLOP: projections plus causal attention, 4·T·S·D·heads/2 with S = T.
func attnLayerFLOP(c *model.Config, t int) float64 {
	h, nh, nkv, dh := float64(c.HiddenSize), float64(c.NumHeads), float64(c.NumKVHeads), float64(c.HeadDim)
	proj := 2*h*(2*nh*dh+2*nkv*dh) + 2*nh*dh*h
	tf := float64(t)
	return tf*proj + 4*tf*tf*dh*nh/2
}

func mlpFLOP(c *model.Config, t int) float64 {
	return float64(t) * 6 * float64(c.HiddenSize) * float64(c.IntermediateSize)
}

// modelFLOP is every layer plus the LM head for the last position (the
// bench runs prefill as generation does: logits of the last token only).
func modelFLOP(c *model.Config, t int) float64 {
	var f float64
	for _, k := range c.LayerTypes {
		if k == model.FullAttention {
			f += attnLayerFLOP(c, t)
		} else {
			f += gdnLayerFLOP(c, t)
		}
		f += mlpFLOP(c, t)
	}
	return f + 2*float64(c.HiddenSize)*float64(c.VocabSize)
}

var ops = []*Op{
	{
		Name: "conv", About: "causal depthwise conv + SiLU over the C = 2·n_k·d_k + n_v·d_v channels of one GDN layer",
		FLOPFormula: "2·K·C per token",
		FLOP:        func(c *model.Config, t int) float64 { return float64(t) * convFLOP(c) },
		Bytes: func(c *model.Config, t int) float64 {
			// read x, write y (float32); taps and state are small.
			return float64(4 * (2*t + 3*c.LinearConvKernel) * c.ConvDim())
		},
		prepare: prepareConv,
	},
	{
		Name: "gdn-core", About: "gated delta rule alone (q, k normalised; g, β given), one sequence, zero initial state",
		FLOPFormula: "7·d_k·d_v per value-head-token (recurrent count; the chunked form does C·(5d_k+3d_v)+6·d_k·d_v)",
		FLOP:        func(c *model.Config, t int) float64 { return float64(t) * coreFLOP(c) },
		prepare:     prepareCore,
	},
	{
		Name: "gdn-layer", About: "one Gated DeltaNet token mixer: projections, conv, core, gated norm, out_proj",
		FLOPFormula: "T·(2·H·(C + n_v·d_v + 2·n_v) + 2·n_v·d_v·H + 2·K·C + 7·d_k·d_v·n_v)",
		FLOP:        gdnLayerFLOP,
		kinds:       []model.LayerKind{model.LinearAttention},
		prepare:     prepareMixer(model.LinearAttention),
	},
	{
		Name: "attention-layer", About: "one gated full-attention token mixer, empty KV cache (prefill)",
		FLOPFormula: "T·(2·H·(2·n_h·d_h + 2·n_kv·d_h) + 2·n_h·d_h·H) + 4·T·S·d_h·n_h/2 (causal, S = T)",
		FLOP:        attnLayerFLOP,
		kinds:       []model.LayerKind{model.FullAttention},
		prepare:     prepareMixer(model.FullAttention),
	},
	{
		Name: "mlp", About: "SwiGLU MLP of one decoder layer",
		FLOPFormula: "6·H·I per token",
		FLOP:        mlpFLOP,
		kinds:       []model.LayerKind{model.LinearAttention},
		prepare:     prepareMLP,
	},
	{
		Name: "decoder-layer", About: "one GDN decoder layer: norm, GDN mixer, residual, norm, MLP, residual",
		FLOPFormula: "gdn-layer + mlp",
		FLOP:        func(c *model.Config, t int) float64 { return gdnLayerFLOP(c, t) + mlpFLOP(c, t) },
		kinds:       []model.LayerKind{model.LinearAttention},
		prepare:     prepareDecoder(model.LinearAttention),
	},
	{
		Name: "decoder-layer-attn", About: "one attention decoder layer: norm, attention mixer, residual, norm, MLP, residual",
		FLOPFormula: "attention-layer + mlp",
		FLOP:        func(c *model.Config, t int) float64 { return attnLayerFLOP(c, t) + mlpFLOP(c, t) },
		kinds:       []model.LayerKind{model.FullAttention},
		prepare:     prepareDecoder(model.FullAttention),
	},
	{
		Name: "model", About: "whole forward (prefill): embeddings, every layer, final norm, logits of the last token",
		FLOPFormula: "Σ layers (mixer + mlp) + 2·H·V for the last position",
		FLOP:        modelFLOP,
		prepare:     prepareModel,
	},
}

// Ops returns the benchmarkable ops in sweep order.
func Ops() []*Op { return ops }

// LookupOp returns the op called name.
func LookupOp(name string) (*Op, bool) {
	for _, o := range ops {
		if o.Name == name {
			return o, true
		}
	}
	return nil, false
}

// OpNames lists the op names in sweep order.
func OpNames() []string {
	var n []string
	for _, o := range ops {
		n = append(n, o.Name)
	}
	return n
}

// inputRNG is a deterministic stream per (seed, op, T), so every backend
// and every rerun sees the same inputs.
func inputRNG(seed uint64, op string, t int) *rand.Rand {
	var h uint64 = 1469598103934665603
	for _, b := range []byte(fmt.Sprintf("%s/%d", op, t)) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return rand.New(rand.NewPCG(seed, h))
}

func normals(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func prepareConv(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	c := ws.cfg
	ch, k := c.ConvDim(), c.LinearConvKernel
	x := normals(inputRNG(seed, "conv", t), t*ch)
	// The taps of layer 0 as a random model would hold them ([C, 1, K]).
	w := model.RandomValues(seed, "layers.0.linear_attn.conv1d.weight", []int{ch, 1, k})
	return func(be *model.Backend) instance {
		return &convInst{be: be, x: x, w: w, t: t, c: ch, k: k, y: make([]float32, t*ch), state: make([]float32, k*ch)}
	}, nil
}

type convInst struct {
	be       *model.Backend
	x, w     []float32
	t, c, k  int
	y, state []float32
}

func (r *convInst) reset()            { clear(r.state) }
func (r *convInst) output() []float32 { return r.y }
func (r *convInst) run() error {
	return r.be.Conv.Forward(r.y, r.x, r.t, r.c, r.w, r.k, r.state)
}

// prepareCore draws core inputs shaped like a real layer's: q and k
// L2-normalised (q also scaled by d_k^−½), v ~ N(0, 1), decays α = e^g
// uniform in (0.6, 1), β = σ(N(0, 1)).
func prepareCore(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	c := ws.cfg
	d := gateddelta.Dims{T: t, NK: c.LinearNumKeyHeads, NV: c.LinearNumValueHeads, DK: c.LinearKeyHeadDim, DV: c.LinearValueHeadDim}
	r := inputRNG(seed, "gdn-core", t)
	q, k := normals(r, t*d.NK*d.DK), normals(r, t*d.NK*d.DK)
	if err := norm.L2Normalize(q, q, d.DK, 1e-6); err != nil {
		return nil, err
	}
	if err := norm.L2Normalize(k, k, d.DK, 1e-6); err != nil {
		return nil, err
	}
	scale := float32(1 / math.Sqrt(float64(d.DK)))
	for i := range q {
		q[i] *= scale
	}
	v := normals(r, t*d.NV*d.DV)
	g, beta := make([]float32, t*d.NV), make([]float32, t*d.NV)
	for i := range g {
		g[i] = float32(math.Log(0.6 + 0.4*r.Float64()))
		beta[i] = float32(1 / (1 + math.Exp(-r.NormFloat64())))
	}
	return func(be *model.Backend) instance {
		return &coreInst{be: be, q: q, k: k, v: v, g: g, beta: beta, d: d,
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
	return normals(inputRNG(seed, op, t), t*h)
}

// mixer runs one block's token mixer with fresh state per run.
type mixer struct {
	be    *model.Backend
	blk   *model.Block
	st    *gateddelta.State
	cache *attention.Cache
}

func newMixer(be *model.Backend, blk *model.Block) *mixer {
	m := &mixer{be: be, blk: blk}
	if blk.Kind == model.FullAttention {
		m.cache = &attention.Cache{}
	} else {
		m.st = gateddelta.NewState(blk.GDN.Dims)
	}
	return m
}

func (m *mixer) reset() {
	if m.cache != nil {
		m.cache.Reset()
	} else {
		m.st.Reset()
	}
}

func (m *mixer) forward(out, x []float32, t int) error {
	if m.cache != nil {
		return m.blk.Attn.Forward(out, x, t, m.cache, attention.Ops{MatMul: m.be.MatMul, Core: m.be.Attn}, nil)
	}
	return m.blk.GDN.Forward(out, x, t, m.st, gateddelta.Ops{MatMul: m.be.MatMul, Conv: m.be.Conv, Core: m.be.Delta}, nil)
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
	blk := ws.gdn
	if blk == nil {
		return nil, fmt.Errorf("the model has no decoder layer")
	}
	h := ws.cfg.HiddenSize
	x := hiddenInput(seed, "mlp", t, h)
	return func(be *model.Backend) instance {
		return &mlpInst{be: be, mlp: &blk.MLP, x: x, t: t, out: make([]float32, t*h)}
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

// prepareDecoder runs one whole decoder block as Session.Forward does:
// x ← x + Mixer(RMSNorm₁₊(x)); x ← x + MLP(RMSNorm₁₊(x)).
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
			n := t * h
			return &decoderInst{mx: newMixer(be, blk), be: be, blk: blk, eps: eps, x0: x, t: t,
				x: make([]float32, n), normed: make([]float32, n), mix: make([]float32, n)}
		}, nil
	}
}

type decoderInst struct {
	mx          *mixer
	be          *model.Backend
	blk         *model.Block
	eps         float32
	x0, x       []float32
	normed, mix []float32
	t           int
}

func (r *decoderInst) reset() {
	r.mx.reset()
	copy(r.x, r.x0)
}
func (r *decoderInst) output() []float32 { return r.x }
func (r *decoderInst) run() error {
	if err := norm.RMSNormOnePlus(r.normed, r.x, r.blk.InputNorm, r.eps); err != nil {
		return err
	}
	if err := r.mx.forward(r.mix, r.normed, r.t); err != nil {
		return err
	}
	addInto(r.x, r.mix)
	if err := norm.RMSNormOnePlus(r.normed, r.x, r.blk.PostNorm, r.eps); err != nil {
		return err
	}
	if err := r.blk.MLP.Forward(r.mix, r.normed, r.t, r.be.MatMul); err != nil {
		return err
	}
	addInto(r.x, r.mix)
	return nil
}

func addInto(x, y []float32) {
	for i, v := range y {
		x[i] += v
	}
}

// prepareModel runs a prefill of T random token ids in a fresh session and
// keeps the final hidden states [T, H] and the last logits for comparison.
func prepareModel(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	if ws.m == nil {
		return nil, fmt.Errorf("no model built")
	}
	r := inputRNG(seed, "model", t)
	ids := make([]int, t)
	for i := range ids {
		ids[i] = r.IntN(ws.m.Config.VocabSize)
	}
	return func(be *model.Backend) instance {
		return &modelInst{be: be, sess: ws.m.NewSession(), ids: ids}
	}, nil
}

type modelInst struct {
	be   *model.Backend
	sess *model.Session
	ids  []int
	out  []float32
}

func (r *modelInst) reset()            { r.sess.Reset() }
func (r *modelInst) output() []float32 { return r.out }
func (r *modelInst) run() error {
	var hidden []float32
	rec := func(stage string, x *tensor.Tensor) {
		if stage == "final_norm" {
			hidden = append(r.out[:0], x.Data...)
		}
	}
	logits, err := r.sess.Forward(r.ids, r.be, model.Options{LastOnly: true, Record: rec})
	if err != nil {
		return err
	}
	r.out = append(hidden, logits.Data...)
	return nil
}
