package model

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/qwenref/qwenref/internal/bufpool"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/linalg"
)

// Limits on what a config may declare, checked before anything is sized
// from it (docs/limits.md states them for users). They are far above every
// published Qwen3.5/3.6 shape (the 27B has 64 layers, width 5120, vocab
// 248,320) and far below what would overflow or exhaust a machine.
const (
	// MaxLayers bounds num_hidden_layers.
	MaxLayers = 1024
	// MaxDim bounds every single dimension (vocab, widths, heads, head dims).
	MaxDim = 1 << 24
	// MaxTensorElems bounds the element count of any one weight tensor.
	MaxTensorElems = 1 << 36
	// MaxParams bounds the text model's total parameter count.
	MaxParams = 1 << 42
	// MaxConfigBytes caps config.json; MaxGenerationConfigBytes caps
	// generation_config.json. Real ones are a few KB.
	MaxConfigBytes           = 16 << 20
	MaxGenerationConfigBytes = 1 << 20
	// maxRopeTheta is the largest RoPE base accepted (Qwen3.5 uses 1e7).
	maxRopeTheta = 1e12
	// maxListedProblems caps how many problems one error spells out.
	maxListedProblems = 20
)

// mulCap multiplies non-negative factors, reporting false when the product
// overflows int64 or exceeds limit.
func mulCap(limit int64, factors ...int) (int64, bool) {
	p := int64(1)
	for _, f := range factors {
		if f < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(uint64(p), uint64(f))
		if hi != 0 || lo > uint64(limit) {
			return 0, false
		}
		p = int64(lo)
	}
	return p, true
}

// checkSizes bounds every dimension and every product the model is sized
// by, with overflow-checked arithmetic, so that nothing later (ConvDim,
// ExpectedTensors, the sessions' buffers) can wrap around or allocate
// without bound.
func (c *Config) checkSizes() []string {
	var errs []string
	dims := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_attention_heads", c.NumHeads}, {"num_key_value_heads", c.NumKVHeads}, {"head_dim", c.HeadDim},
		{"linear_num_key_heads", c.LinearNumKeyHeads}, {"linear_num_value_heads", c.LinearNumValueHeads},
		{"linear_key_head_dim", c.LinearKeyHeadDim}, {"linear_value_head_dim", c.LinearValueHeadDim},
		{"linear_conv_kernel_dim", c.LinearConvKernel},
	}
	for _, d := range dims {
		if d.v > MaxDim {
			errs = append(errs, fmt.Sprintf("%s is %d, over the limit of %d (see docs/limits.md)", d.name, d.v, MaxDim))
		}
	}
	if c.NumLayers > MaxLayers {
		errs = append(errs, fmt.Sprintf("num_hidden_layers is %d, over the limit of %d (see docs/limits.md)", c.NumLayers, MaxLayers))
	}
	if len(c.LayerTypes) != c.NumLayers {
		errs = append(errs, fmt.Sprintf("%d layer types for %d layers", len(c.LayerTypes), c.NumLayers))
	}
	if c.MaxPositionEmbeddings > 1<<30 {
		errs = append(errs, fmt.Sprintf("max_position_embeddings is %d, over the limit of %d", c.MaxPositionEmbeddings, 1<<30))
	}
	if len(errs) > 0 {
		return errs // the products below would only repeat these
	}
	h := c.HiddenSize
	tensors := []struct {
		name    string
		factors []int
	}{
		{"embed_tokens [vocab_size, hidden_size]", []int{c.VocabSize, h}},
		{"mlp [intermediate_size, hidden_size]", []int{c.IntermediateSize, h}},
		{"q_proj [2·num_attention_heads·head_dim, hidden_size]", []int{2, c.NumHeads, c.HeadDim, h}},
		{"k_proj [num_key_value_heads·head_dim, hidden_size]", []int{c.NumKVHeads, c.HeadDim, h}},
		{"the GDN key projections [2·linear_num_key_heads·linear_key_head_dim, hidden_size]", []int{2, c.LinearNumKeyHeads, c.LinearKeyHeadDim, h}},
		{"the GDN output gate projection [linear_num_value_heads·linear_value_head_dim, hidden_size]", []int{c.LinearNumValueHeads, c.LinearValueHeadDim, h}},
		{"recurrent state [linear_num_value_heads, linear_key_head_dim, linear_value_head_dim]", []int{c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim}},
	}
	for _, t := range tensors {
		if _, ok := mulCap(MaxTensorElems, t.factors...); !ok {
			errs = append(errs, fmt.Sprintf("%s has more than %d elements (see docs/limits.md)", t.name, int64(MaxTensorElems)))
		}
	}
	if len(errs) == 0 {
		if _, ok := mulCap(MaxTensorElems, c.ConvDim(), c.LinearConvKernel); !ok {
			errs = append(errs, fmt.Sprintf("conv1d [conv channels, linear_conv_kernel_dim] has more than %d elements", int64(MaxTensorElems)))
		}
	}
	if len(errs) == 0 {
		// Every factor is ≤ 2^24 and every product ≤ 2^36 now, so the sums
		// in ConvDim and TextParams cannot overflow; only their size is left.
		if p := c.TextParams(); p > MaxParams {
			errs = append(errs, fmt.Sprintf("the config describes %d parameters, over the limit of %d (see docs/limits.md)", p, int64(MaxParams)))
		}
	}
	return errs
}

// Memory is an estimate of the memory a run allocates beyond the mapped
// weights, in bytes.
type Memory struct {
	Activations int64 // per-forward buffers of the widest layer, all rows
	Logits      int64 // logits (and hidden states) the command keeps
	States      int64 // GDN recurrent and conv states, all rows
	Caches      int64 // attention key/value caches at full length, all rows
	Scratch     int64 // the products' packing buffers (linalg.ScratchBytes)
}

// Total is the sum of the parts.
func (m Memory) Total() int64 {
	return m.Activations + m.Logits + m.States + m.Caches + m.Scratch
}

// String gives the total and its parts in GiB (MiB under 1 GiB).
func (m Memory) String() string {
	unit, div := "GiB", float64(1<<30)
	if m.Total() < 1<<30 {
		unit, div = "MiB", 1<<20
	}
	g := func(b int64) string { return fmt.Sprintf("%.2f", float64(b)/div) }
	return fmt.Sprintf("%s %s (activations %s, logits %s, states %s, caches %s, scratch %s %s)",
		g(m.Total()), unit, g(m.Activations), g(m.Logits), g(m.States), g(m.Caches), g(m.Scratch), unit)
}

// EstimateMemory estimates what rows independent sequences of tokens
// positions each allocate, with logitRows rows of logits kept in all
// (rows·tokens for `forward`, one for generation). Weights are not
// counted: they are mapped from the checkpoint and paged by the OS. Each
// term follows what the CPU forward holds (workBytes): the residual
// stream and the block's two work areas, each layer kind's buffers from
// internal/bufpool once (the pool hands them from layer to layer of a
// kind, and keeps every kind's), the smaller buffers every layer
// allocates afresh, and room for the collector to leave those unfreed.
// No CPU attention kernel holds T × T scores: the naive one keeps one row
// of scores, the chunked one a tile per worker, both independent of T. It
// fails on overflow.
func EstimateMemory(cfg *Config, rows, tokens, logitRows int) (Memory, error) {
	return estimate(cfg, rows, tokens, logitRows, false, false)
}

// EstimateRecorded is EstimateMemory for a recorded pass (trace): a
// recorder may keep what it is shown, so every layer's buffers are
// allocated afresh instead of lent from the pool, and all of them are
// charged as allocated, none freed.
func EstimateRecorded(cfg *Config, rows, tokens, logitRows int) (Memory, error) {
	return estimate(cfg, rows, tokens, logitRows, true, true)
}

// ProductScratch is the packing buffers that products of up to m rows by
// weights of up to n rows and k columns keep (linalg.ScratchBytes), for
// sizing what runs products outside a model pass (bench's cases).
func ProductScratch(m, k, n int) int64 { return linalg.ScratchBytes(m, k, n) }

// KeptHeadroom is the room for the collector charged on top of kept bytes
// that a run holds live to its end (its inputs, outputs and copies), where
// nothing of its own gives the collector garbage to free: a memory limit
// (BoundHeap) within a few percent of the live heap makes the collector run
// back to back and then let the heap pass the limit, so a seventh more is
// charged, which puts the limit an eighth above what is kept.
func KeptHeadroom(kept int64) int64 { return kept / 7 }

// EstimateTrace is what `trace` over tokens holds, in bytes: a recorded
// pass (EstimateRecorded) and a copy of every stage it records, about its
// activations again, all kept to the end, and their KeptHeadroom.
func EstimateTrace(cfg *Config, tokens int) (int64, error) {
	est, err := EstimateRecorded(cfg, 1, tokens, tokens)
	if err != nil {
		return 0, err
	}
	live := est.Total() + est.Activations // each part is at most MaxInt64/8: no overflow
	return live + KeptHeadroom(live), nil
}

// EstimateFresh is EstimateMemory for a pass whose recorder copies what it
// keeps (forward's final-norm hidden states, counted with the logits):
// every layer's buffers are allocated afresh, as in a recorded pass, but
// dropped when the layer ends, so the collector may free them.
func EstimateFresh(cfg *Config, rows, tokens, logitRows int) (Memory, error) {
	return estimate(cfg, rows, tokens, logitRows, true, false)
}

// estimate sizes a run: fresh when every layer allocates its buffers
// anew, kept when nothing a layer allocates is freed before the run ends.
func estimate(cfg *Config, rows, tokens, logitRows int, fresh, kept bool) (Memory, error) {
	if rows < 0 || tokens < 0 || logitRows < 0 {
		return Memory{}, fmt.Errorf("negative size: %d rows, %d tokens, %d logit rows", rows, tokens, logitRows)
	}
	if errs := cfg.checkSizes(); len(errs) > 0 {
		return Memory{}, fmt.Errorf("config: %s", safeio.List(errs, maxListedProblems))
	}
	const f32, lim = 4, math.MaxInt64 / 8
	overflow := fmt.Errorf("%d rows × %d tokens overflow any memory estimate", rows, tokens)
	n, ok := mulCap(1<<40, rows, tokens)
	if !ok {
		return Memory{}, overflow
	}
	var m Memory
	var oks [3]bool
	m.Logits, oks[0] = mulCap(lim, logitRows, cfg.VocabSize+cfg.HiddenSize, f32)
	oks[1], oks[2] = true, true
	for _, k := range mixerKinds {
		if k == nil {
			continue
		}
		layers := kindLayers(cfg, k.kind)
		if layers == 0 {
			continue
		}
		st, o1 := mulCap(lim, rows, layers, int(k.state(cfg)), f32)
		ca, o2 := mulCap(lim, rows, layers, tokens, int(k.cache(cfg)), f32)
		m.States, m.Caches = m.States+st, m.Caches+ca
		oks[1], oks[2] = oks[1] && o1 && m.States <= lim, oks[2] && o2 && m.Caches <= lim
	}
	if !oks[0] || !oks[1] || !oks[2] {
		return Memory{}, overflow
	}
	live, garbage, ok := workBytes(cfg, int(n), fresh)
	if !ok {
		return Memory{}, overflow
	}
	// Each row runs on its own, so a product takes at most tokens rows; the
	// LM head takes them only when their logits are kept (else one row,
	// which needs no packing).
	widest := max(cfg.HiddenSize, cfg.ConvDim()+cfg.LinearNumValueHeads*cfg.LinearValueHeadDim, 2*cfg.NumHeads*cfg.HeadDim,
		2*cfg.IntermediateSize, 2*cfg.MoE.IntermediateSize, 2*cfg.MoE.SharedIntermediate)
	if logitRows > rows {
		widest = max(widest, cfg.VocabSize)
	}
	m.Scratch = linalg.ScratchBytes(tokens, max(cfg.HiddenSize, cfg.IntermediateSize, cfg.MoE.IntermediateSize, cfg.MoE.SharedIntermediate,
		cfg.NumHeads*cfg.HeadDim, cfg.LinearNumValueHeads*cfg.LinearValueHeadDim), widest)
	if kept {
		m.Activations = live + garbage
		return m, nil
	}
	// Go's collector (GOGC=100) lets the heap grow to twice what was live
	// at its last collection before it collects again, so what the layers
	// drop may stay allocated up to the size of everything live.
	m.Activations = live + min(garbage, live+m.Logits+m.States+m.Caches)
	return m, nil
}

// kindLayers counts cfg's layers of kind.
func kindLayers(cfg *Config, kind LayerKind) int {
	n := 0
	for _, l := range cfg.LayerTypes {
		if l == kind {
			n++
		}
	}
	return n
}

// workBytes is what one forward over t rows allocates for its work, split
// into what stays live (the residual stream x and the block's normed and
// mix areas; the pooled buffers of each layer kind, and of the dense MLP,
// once, at the pool's capacity) and what every layer allocates and drops
// (buffers too small to pool, and a sparse block's MoE work).
func workBytes(cfg *Config, t int, recorded bool) (live, garbage int64, ok bool) {
	const f32 = 4
	// layer is what one layer of the kind at hand allocates afresh (all of
	// its buffers in a recorded pass) and drops when it ends: live while it
	// runs, so the largest (most) is live with the rest.
	var layer, most int64
	buf := func(w int64, layers int, fresh bool) {
		if fresh || !bufpool.Pooled(int(w)*t) { // w ≤ 2^26 and t ≤ 2^40: no overflow in int64
			garbage += w * int64(t) * f32 * int64(layers)
			layer += w * int64(t) * f32
			return
		}
		live += int64(bufpool.Cap(int(w)*t)) * f32
	}
	h := int64(cfg.HiddenSize)
	if h*int64(t) > math.MaxInt64/64 || int64(cfg.IntermediateSize)*int64(t) > math.MaxInt64/64 {
		return 0, 0, false
	}
	live = 3 * h * int64(t) * f32
	for _, k := range mixerKinds {
		if k == nil {
			continue
		}
		if n := kindLayers(cfg, k.kind); n > 0 {
			layer = 0
			for _, w := range k.bufs(cfg) {
				if w*int64(t) > math.MaxInt64/64 {
					return 0, 0, false
				}
				buf(w, n, recorded) // a recorded layer allocates its buffers afresh
			}
			most = max(most, layer)
		}
	}
	sparse := cfg.SparseLayers()
	if dense := cfg.NumLayers - sparse; dense > 0 { // the SwiGLU rows and the up projection's, pooled even when recorded
		buf(int64(cfg.IntermediateSize), dense, false)
		buf(int64(cfg.IntermediateSize), dense, false)
	}
	if sparse > 0 {
		w := cfg.moeWorkingSet()
		if w*int64(t) > math.MaxInt64/64/int64(sparse) {
			return 0, 0, false
		}
		garbage += w * int64(t) * f32 * int64(sparse)
	}
	live += most
	return live, garbage, live >= 0 && garbage >= 0 && live+garbage < math.MaxInt64/8
}

// CheckLength refuses sequences longer than the model's context
// (max_position_embeddings); what names the argument for the message.
func (c *Config) CheckLength(tokens int, what string) error {
	if tokens > c.MaxPositionEmbeddings {
		return fmt.Errorf("%s: %d positions exceed the model's max_position_embeddings of %d", what, tokens, c.MaxPositionEmbeddings)
	}
	return nil
}

// CheckMemory estimates a run (see EstimateMemory) and refuses it with the
// estimate when it exceeds limit bytes; flag names the limit's source for
// the message (e.g. "--max-memory 12 GiB"). limit ≤ 0 means no limit.
func CheckMemory(cfg *Config, rows, tokens, logitRows int, limit int64, flag string) error {
	est, err := EstimateMemory(cfg, rows, tokens, logitRows)
	if err != nil {
		return err
	}
	return overLimit(est, rows, tokens, limit, flag)
}

// overLimit refuses est when it exceeds limit bytes (≤ 0: no limit).
func overLimit(est Memory, rows, tokens int, limit int64, flag string) error {
	if limit > 0 && est.Total() > limit {
		return fmt.Errorf("%d×%d tokens need about %s beyond the weights, over the limit of %.3g GiB (%s): use fewer or shorter sequences, or raise --max-memory",
			rows, tokens, est, float64(limit)/(1<<30), flag)
	}
	return nil
}

// CheckRecordedMemory is CheckMemory for a pass whose layers allocate
// their buffers afresh (see EstimateFresh).
func CheckRecordedMemory(cfg *Config, rows, tokens, logitRows int, limit int64, flag string) error {
	est, err := EstimateFresh(cfg, rows, tokens, logitRows)
	if err != nil {
		return err
	}
	return overLimit(est, rows, tokens, limit, flag)
}

// CheckGenerationMemory is CheckMemory for a run that computes prefill
// tokens in one pass and then one token per pass up to tokens: the
// activations are the prefill's (or one token's), the caches and states
// those of all tokens. prefill 0 means all tokens at once.
func CheckGenerationMemory(cfg *Config, rows, prefill, tokens, logitRows int, limit int64, flag string) error {
	_, err := checkGeneration(cfg, rows, prefill, tokens, logitRows, limit, flag)
	return err
}

// checkGeneration is CheckGenerationMemory returning the estimate.
func checkGeneration(cfg *Config, rows, prefill, tokens, logitRows int, limit int64, flag string) (Memory, error) {
	if prefill <= 0 || prefill >= tokens {
		est, err := EstimateMemory(cfg, rows, tokens, logitRows)
		if err != nil {
			return est, err
		}
		return est, overLimit(est, rows, tokens, limit, flag)
	}
	est, err := EstimateMemory(cfg, rows, prefill, logitRows)
	if err != nil {
		return est, err
	}
	full, err := EstimateMemory(cfg, rows, tokens, 0)
	if err != nil {
		return est, err
	}
	// The caches grow by append, about 1.25× at a time, and the old
	// array is live while it is copied: 2.25× the full caches at worst.
	est.Caches = full.Caches + full.Caches*5/4
	if limit > 0 && est.Total() > limit {
		return est, fmt.Errorf("%d×%d tokens (%d at once) need about %s beyond the weights, over the limit of %.3g GiB (%s): use a shorter prompt or fewer new tokens, or raise --max-memory",
			rows, tokens, prefill, est, float64(limit)/(1<<30), flag)
	}
	return est, nil
}
