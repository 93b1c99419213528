package bench

import (
	"fmt"
	"math/rand/v2"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
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
	rows          int                              // op model and decode: batch rows B (0 or 1: one)
	blocks        map[model.LayerKind]*model.Block // the first block of each mixer kind
}

func (ws *workspace) block(k model.LayerKind) *model.Block { return ws.blocks[k] }

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
