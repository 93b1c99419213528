package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
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
	// bytes one call must move at least, with activations of elem bytes
	// each (4 on the host; a device may time a bf16 form).
	Bytes func(c *model.Config, t, elem int) float64

	// kinds are the decoder blocks the op runs (nil: no weights needed).
	kinds []model.LayerKind
	// wholeModel ops run a whole (random or loaded) model.
	wholeModel bool
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
	cfg    *model.Config
	states int          // decode-core: how many layers' states to cycle through
	m      *model.Model // nil when no op needs weights, or with deviceWeights
	// deviceWeights: op model and decode run on runners whose backend
	// generates the weights from seed itself (model.NewRandomRunner).
	deviceWeights bool
	seed          uint64
	rows          int          // op model and decode: batch rows B (0 or 1: one)
	gdn           *model.Block // first linear-attention block
	attn          *model.Block // first full-attention block
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

// moeFLOP is one sparse block's work per token: the router 2·H·E, the k
// routed experts 6·H·I_moe each and the shared expert 6·H·I_s.
func moeFLOP(c *model.Config, t int) float64 {
	m, h := c.MoE, float64(c.HiddenSize)
	return float64(t) * (2*h*float64(m.NumExperts) + 6*h*float64(m.IntermediateSize*m.NumExpertsPerTok) + 6*h*float64(m.SharedIntermediate) + 2*h)
}

// ffnFLOP is layer i's MLP or MoE block.
func ffnFLOP(c *model.Config, i, t int) float64 {
	if c.SparseLayer(i) {
		return moeFLOP(c, t)
	}
	return mlpFLOP(c, t)
}

// firstFFNFLOP is ffnFLOP of the first layer of a kind (the block the
// decoder-layer ops run).
func firstFFNFLOP(c *model.Config, kind model.LayerKind, t int) float64 {
	for i, k := range c.LayerTypes {
		if k == kind {
			return ffnFLOP(c, i, t)
		}
	}
	return mlpFLOP(c, t)
}

// modelFLOP is every layer plus the LM head for the last position (the
// bench runs prefill as generation does: logits of the last token only).
func modelFLOP(c *model.Config, t int) float64 {
	var f float64
	for i, k := range c.LayerTypes {
		if k == model.FullAttention {
			f += attnLayerFLOP(c, t)
		} else {
			f += gdnLayerFLOP(c, t)
		}
		f += ffnFLOP(c, i, t)
	}
	return f + 2*float64(c.HiddenSize)*float64(c.VocabSize)
}

var ops = []*Op{
	{
		Name: "conv", About: "causal depthwise conv + SiLU over the C = 2·n_k·d_k + n_v·d_v channels of one GDN layer",
		FLOPFormula: "2·K·C per token",
		FLOP:        func(c *model.Config, t int) float64 { return float64(t) * convFLOP(c) },
		Bytes: func(c *model.Config, t, elem int) float64 {
			// read x, write y; taps and state are small.
			return float64(elem * (2*t + 3*c.LinearConvKernel) * c.ConvDim())
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
		Name: "moe", About: "one sparse mixture-of-experts block (router, top-k routed experts, gated shared expert) of the first GDN layer; moe=naive runs it per token",
		FLOPFormula: "T·(2·H·E + 6·H·I_moe·k + 6·H·I_s)",
		FLOP:        moeFLOP,
		kinds:       []model.LayerKind{model.LinearAttention},
		prepare:     prepareMoE,
	},
	{
		Name: "decoder-layer", About: "one GDN decoder layer: norm, GDN mixer, residual, norm, MLP, residual",
		FLOPFormula: "gdn-layer + mlp (or moe)",
		FLOP: func(c *model.Config, t int) float64 {
			return gdnLayerFLOP(c, t) + firstFFNFLOP(c, model.LinearAttention, t)
		},
		kinds:   []model.LayerKind{model.LinearAttention},
		prepare: prepareDecoder(model.LinearAttention),
	},
	{
		Name: "decoder-layer-attn", About: "one attention decoder layer: norm, attention mixer, residual, norm, MLP, residual",
		FLOPFormula: "attention-layer + mlp (or moe)",
		FLOP: func(c *model.Config, t int) float64 {
			return attnLayerFLOP(c, t) + firstFFNFLOP(c, model.FullAttention, t)
		},
		kinds:   []model.LayerKind{model.FullAttention},
		prepare: prepareDecoder(model.FullAttention),
	},
	{
		Name: "model", About: "whole forward (prefill): embeddings, every layer, final norm, logits of the last token",
		FLOPFormula: "Σ layers (mixer + mlp) + 2·H·V for the last position",
		FLOP:        modelFLOP,
		wholeModel:  true,
		prepare:     prepareModel,
	},
	{
		Name: "decode", About: "one decode step of the whole model at position T (prefilled untimed; each timed run appends one token, as generation does, re-prefilling after 64 steps; compared on the first step's logits)",
		FLOPFormula: "Σ layers (mixer + mlp) at one token + 2·H·V",
		FLOP:        func(c *model.Config, t int) float64 { return modelFLOP(c, 1) },
		wholeModel:  true,
		prepare:     prepareDecode,
	},
	{
		Name: "decode-core", About: "one token through the gated delta rule core (the decode kernel), cycling through --states layers' states so they are not in cache",
		FLOPFormula: "7·d_k·d_v per value head",
		FLOP:        func(c *model.Config, t int) float64 { return coreFLOP(c) },
		Bytes: func(c *model.Config, t, elem int) float64 {
			// read and write one layer's state [NV, DK, DV].
			return float64(2 * elem * c.LinearNumValueHeads * c.LinearKeyHeadDim * c.LinearValueHeadDim)
		},
		prepare: prepareDecodeCore,
	},
	{
		Name: "gemm", About: "y[T, C] = x[T, H]·Wᵀ with W [C, H] the GDN qkv projection (C = 2·n_k·d_k + n_v·d_v; 2048×5120×10240 at T = 2048 on the 27B); --bf16 for bf16 weights",
		FLOPFormula: "2·T·H·C",
		FLOP: func(c *model.Config, t int) float64 {
			return 2 * float64(t) * float64(c.HiddenSize) * float64(c.ConvDim())
		},
		kinds:   []model.LayerKind{model.LinearAttention},
		prepare: prepareGEMM,
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

// caseSeed is a deterministic seed per (seed, op, T), so every backend
// and every rerun sees the same inputs.
func caseSeed(seed uint64, op string, t int) uint64 {
	return reference.StreamFor(fmt.Sprintf("%d/%s/%d", seed, op, t))
}

// inputRNG is the random stream of one (seed, op, T) case.
func inputRNG(seed uint64, op string, t int) *rand.Rand {
	return reference.Rand(seed, reference.StreamFor(fmt.Sprintf("%s/%d", op, t)))
}

func prepareConv(ws *workspace, t int, seed uint64) (func(*model.Backend) instance, error) {
	c := ws.cfg
	ch, k := c.ConvDim(), c.LinearConvKernel
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
	blk := ws.gdn
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
	blk := ws.gdn
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
	if dt, ok := r.runner.(interface{ LastDeviceTime() (time.Duration, bool) }); ok {
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
	w := blk.GDN.W.InProjQKV
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
