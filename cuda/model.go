package cuda

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// Weight slots of qr_model_set (the QR_W_* enum of qwenref_cuda.h).
const (
	wEmbed = iota
	wLMHead
	wFinalNorm
	wInputNorm
	wPostNorm
	wMLPGate
	wMLPUp
	wMLPDown
	wGDNQKV
	wGDNZ
	wGDNB
	wGDNA
	wGDNOut
	wGDNConv
	wGDNALog
	wGDNDtBias
	wGDNNorm
	wAttQ
	wAttK
	wAttV
	wAttO
	wAttQNorm
	wAttKNorm
	wMoERouter
	wMoESharedProb
	wMoESharedGate
	wMoESharedUp
	wMoESharedDown
	wMoEGate // per expert (part = expert)
	wMoEUp
	wMoEDown
)

// residentModel is a whole Qwen3.5/3.6 text model resident on the GPU: bf16 weights,
// an fp32 residual stream, fp32 recurrent states and logits, bf16 conv
// states and KV caches; a sparse layer's MLP is the MoE block (router,
// top-k, grouped expert GEMMs, gated shared expert). It is one sequence at a time (like model.Session):
// Forward feeds tokens at the current position, Reset starts over. GDN head
// dims must be 128 and the attention head dim 256 (every Qwen3.5/3.6 size).
// With f32 it is the fp32 model of cuda-fp32 instead: the same block plan
// with every weight, activation, state and cache in fp32, any head dims.
// Its methods hold the Device's lock; Close (or the Device's) frees it. Callers
// outside the package reach it only through model.Runner (runner.go).
type residentModel struct {
	dev       *Device
	h         unsafe.Pointer
	cfg       *model.Config
	maxTokens int
	f32       bool
}

// dimsOf maps a config to the library's dimensions (of the bf16 model; the
// caller sets f32 for the fp32 one).
func dimsOf(cfg *model.Config, maxTokens int) (modelDims, []int32, error) {
	if err := cfg.Validate(); err != nil {
		return modelDims{}, nil, err
	}
	if maxTokens <= 0 {
		return modelDims{}, nil, fmt.Errorf("cuda: model: maxTokens %d", maxTokens)
	}
	kinds := make([]int32, cfg.NumLayers)
	for i, k := range cfg.LayerTypes {
		if k == model.FullAttention {
			kinds[i] = 1
		}
		if cfg.SparseLayer(i) {
			kinds[i] |= 2
		}
	}
	i := func(v int) int32 { return int32(v) }
	moeDims := func(d modelDims) modelDims {
		if m := cfg.MoE; cfg.IsMoE() {
			d.experts, d.topk, d.moeInter, d.sharedInter = i(m.NumExperts), i(m.NumExpertsPerTok), i(m.IntermediateSize), i(m.SharedIntermediate)
			d.normTopK = b2i(m.NormTopKProb)
		}
		return d
	}
	return moeDims(modelDims{
		vocab: i(cfg.VocabSize), hidden: i(cfg.HiddenSize), inter: i(cfg.IntermediateSize), nlayers: i(cfg.NumLayers),
		nk: i(cfg.LinearNumKeyHeads), nv: i(cfg.LinearNumValueHeads), dk: i(cfg.LinearKeyHeadDim),
		dv: i(cfg.LinearValueHeadDim), kconv: i(cfg.LinearConvKernel), nh: i(cfg.NumHeads), nkv: i(cfg.NumKVHeads),
		hd: i(cfg.HeadDim), rot: i(cfg.RotaryDim()), theta: float32(cfg.RopeTheta), eps: float32(cfg.RMSNormEps),
		maxTokens: i(maxTokens),
	}), kinds, nil
}

// newModel allocates a model of cfg's shape (weights not yet set), the
// fp32 model when f32.
func (d *Device) newModel(cfg *model.Config, maxTokens int, f32 bool) (*residentModel, error) {
	dims, kinds, err := dimsOf(cfg, maxTokens)
	if err != nil {
		return nil, err
	}
	dims.f32 = b2i(f32)
	d.mu.Lock()
	defer d.mu.Unlock()
	var h unsafe.Pointer // a local: cgo refuses a pointer into a struct holding Go pointers
	if err := d.callLocked("model_create", func() int { return cModelCreate(&h, dims, kinds) }); err != nil {
		return nil, err
	}
	m := &residentModel{dev: d, h: h, cfg: cfg, maxTokens: maxTokens, f32: f32}
	d.models[m] = struct{}{}
	steps, names, err := cPlan(cfg)
	if err == nil {
		err = d.callLocked("model_plan", func() int { return cModelPlan(h, steps, names) })
	}
	if err != nil {
		delete(d.models, m)
		_ = d.callLocked("model_destroy", func() int { return cModelDestroy(h) })
		return nil, err
	}
	return m, nil
}

// cPlan is cfg's block plan (model.Plan) in the library's form: the steps,
// and their stage names packed NUL-terminated.
func cPlan(cfg *model.Config) ([]cStep, []byte, error) {
	plan, err := model.Plan(cfg)
	if err != nil {
		return nil, nil, err
	}
	moeShape, err := launchShape(MoEDecodeShapeEnv, MoEDecodeShapes, defaultMoEDecodeShape)
	if err != nil {
		return nil, nil, err
	}
	gemvShape, err := launchShape(GEMVShapeEnv, GEMVShapes, defaultGEMVShape)
	if err != nil {
		return nil, nil, err
	}
	normSlot := map[model.NormWeight]int32{model.NormInput: wInputNorm, model.NormPost: wPostNorm, model.NormFinal: wFinalNorm}
	steps := make([]cStep, len(plan))
	var names []byte
	for i, p := range plan {
		if len(p.Stages) > stepRecords {
			return nil, nil, fmt.Errorf("cuda: plan step %d (%s) records %d stages, the library takes %d", i, p.Op, len(p.Stages), stepRecords)
		}
		s := cStep{op: int32(p.Op), layer: int32(p.Layer), arg: normSlot[p.Norm]}
		switch p.Op {
		case model.OpMoEExperts:
			s.arg = int32(moeShape)
		case model.OpGDNInProj, model.OpGDNOut, model.OpAttnQKV, model.OpAttnOut, model.OpMLPGateUp, model.OpMLPDown,
			model.OpMoERoute, model.OpLMHead:
			s.arg = int32(gemvShape)
		}
		for r := range s.rec {
			s.rec[r] = -1
		}
		for r, name := range p.Stages {
			s.rec[r] = int32(len(names))
			names = append(append(names, name...), 0)
		}
		steps[i] = s
	}
	return steps, names, nil
}

// newRandomModel builds a model of cfg's shape whose weights are generated
// on the GPU from seed (a counter-based hash, so nothing crosses the bus):
// linear weights N(0, 1/fan_in), embeddings N(0, 1), (1+w) norm weights
// U(−0.5, 0.5), the GDN norm U(0.5, 1.5), log A = log U(0.05, 8), the dt bias
// U(−1, 1), conv taps N(0, 0.25), the distributions of model.RandomValues
// (not its values). maxTokens sizes the KV caches; f32 makes the fp32
// model (the same values, not rounded to bf16).
func (d *Device) newRandomModel(cfg *model.Config, seed uint64, maxTokens int, f32 bool) (*residentModel, error) {
	est := estimateMemory(cfg, f32, maxTokens, 1, 1)
	if err := d.checkFits(fmt.Sprintf("the model with caches for %d tokens, %s,", maxTokens, est), est.Total()); err != nil {
		return nil, err
	}
	m, err := d.newModel(cfg, maxTokens, f32)
	if err != nil {
		return nil, err
	}
	if err := d.call("model_random", func() int { return cModelRandom(m.h, seed) }); err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

// uploadModel copies a host model's weights to the GPU tensor by tensor
// (bf16 matrices as stored, straight from the checkpoint's memory map;
// float32 matrices rounded to bf16 there, or, for the fp32 model, bf16
// ones widened there; vectors as float32), after checking that the
// weights, states and caches fit in the free memory.
func (d *Device) uploadModel(hm *model.Model, maxTokens int, f32 bool) (*residentModel, error) {
	return d.uploadModelProgress(hm, maxTokens, f32, nil)
}

// uploadModelProgress is uploadModel reporting progress: after each tensor,
// progress(bytes done, bytes in all) when it is not nil.
func (d *Device) uploadModelProgress(hm *model.Model, maxTokens int, f32 bool, progress func(done, total int64)) (*residentModel, error) {
	if maxTokens <= 0 {
		return nil, fmt.Errorf("cuda: model: maxTokens %d", maxTokens)
	}
	est := estimateMemory(hm.Config, f32, maxTokens, 1, 1)
	if err := d.checkFits(fmt.Sprintf("the model with caches for %d tokens, %s,", maxTokens, est), est.Total()); err != nil {
		return nil, err
	}
	m, err := d.newModel(hm.Config, maxTokens, f32)
	if err != nil {
		return nil, err
	}
	if err := m.upload(hm, progress); err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

func (m *residentModel) upload(hm *model.Model, progress func(done, total int64)) error {
	var done, total int64
	size := func(w *tensor.Matrix) int64 {
		if w.IsBF16() {
			return int64(len(w.BF16)) * 2
		}
		return int64(len(w.F32)) * 4
	}
	total += 2*size(hm.Embed) + int64(len(hm.FinalNorm))*4
	for l := range hm.Blocks {
		b := &hm.Blocks[l]
		if b.MLP != nil {
			total += size(b.MLP.Gate) + size(b.MLP.Up) + size(b.MLP.Down)
		}
		if x := b.MoE; x != nil {
			w := &x.W
			total += size(w.Router) + size(w.SharedProb) + size(w.SharedGate) + size(w.SharedUp) + size(w.SharedDown)
			for e := range w.Gate {
				total += size(w.Gate[e]) + size(w.Up[e]) + size(w.Down[e])
			}
		}
		for _, w := range b.Mixer.Matrices() {
			total += size(w)
		}
	}
	var first error
	step := func(n int64, op string, f func() int) {
		if first != nil {
			return
		}
		first = m.dev.call(op, f)
		done += n
		if progress != nil {
			progress(done, total)
		}
	}
	part := func(layer, which, expert int, w *tensor.Matrix) {
		step(size(w), fmt.Sprintf("model_set %d/%d/%d", layer, which, expert), func() int {
			if w.IsBF16() {
				return cModelSetBF16(m.h, layer, which, expert, w.BF16)
			}
			return cModelSetF32(m.h, layer, which, expert, w.F32)
		})
	}
	mat := func(layer, which int, w *tensor.Matrix) { part(layer, which, 0, w) }
	vec := func(layer, which int, v []float32) {
		step(int64(len(v))*4, fmt.Sprintf("model_set %d/%d", layer, which), func() int {
			return cModelSetF32(m.h, layer, which, 0, v)
		})
	}
	mat(0, wEmbed, hm.Embed)
	mat(0, wLMHead, hm.LMHead)
	vec(0, wFinalNorm, hm.FinalNorm)
	for l := range hm.Blocks {
		b := &hm.Blocks[l]
		vec(l, wInputNorm, b.InputNorm)
		vec(l, wPostNorm, b.PostNorm)
		if b.MLP != nil {
			mat(l, wMLPGate, b.MLP.Gate)
			mat(l, wMLPUp, b.MLP.Up)
			mat(l, wMLPDown, b.MLP.Down)
		}
		if x := b.MoE; x != nil {
			w := &x.W
			mat(l, wMoERouter, w.Router)
			mat(l, wMoESharedProb, w.SharedProb)
			mat(l, wMoESharedGate, w.SharedGate)
			mat(l, wMoESharedUp, w.SharedUp)
			mat(l, wMoESharedDown, w.SharedDown)
			for e := range w.Gate {
				part(l, wMoEGate, e, w.Gate[e])
				part(l, wMoEUp, e, w.Up[e])
				part(l, wMoEDown, e, w.Down[e])
			}
		}
		if g := b.GDN(); g != nil {
			mat(l, wGDNQKV, g.W.InProjQKV)
			mat(l, wGDNZ, g.W.InProjZ)
			mat(l, wGDNB, g.W.InProjB)
			mat(l, wGDNA, g.W.InProjA)
			mat(l, wGDNOut, g.W.OutProj)
			vec(l, wGDNConv, g.W.ConvW)
			vec(l, wGDNALog, g.W.ALog)
			vec(l, wGDNDtBias, g.W.DtBias)
			vec(l, wGDNNorm, g.W.NormW)
		}
		if a := b.Attn(); a != nil {
			mat(l, wAttQ, a.W.QProj)
			mat(l, wAttK, a.W.KProj)
			mat(l, wAttV, a.W.VProj)
			mat(l, wAttO, a.W.OProj)
			vec(l, wAttQNorm, a.W.QNorm)
			vec(l, wAttKNorm, a.W.KNorm)
		}
	}
	return first
}

// Config is the model's configuration.
func (m *residentModel) Config() *model.Config { return m.cfg }

// Forward feeds ids at the current position and returns fp32 logits
// [len(ids), vocab], or [1, vocab] with lastOnly. One token takes the decode
// path (GEMVs, recurrent update, split-key attention) as a CUDA-graph
// replay, more the prefill path (cuBLAS, chunked tensor-core core, flash
// attention).
func (m *residentModel) Forward(ids []int, lastOnly bool) ([]float32, error) {
	rows := len(ids)
	if lastOnly {
		rows = 1
	}
	if len(ids) == 0 {
		return nil, model.ErrEmpty
	}
	logits := make([]float32, rows*m.cfg.VocabSize)
	return logits, m.forward(ids, rows, logits)
}

// Feed runs ids at the current position and copies no logits back (a
// prefill whose logits nobody reads).
func (m *residentModel) Feed(ids []int) error {
	return m.forward(ids, 0, nil)
}

// forward runs ids and writes the logits of the last `rows` positions
// (rows is len(ids), 1, or 0 for none) into logits, which must hold
// rows·V values.
func (m *residentModel) forward(ids []int, rows int, logits []float32) error {
	if len(ids) == 0 {
		return model.ErrEmpty
	}
	if len(logits) != rows*m.cfg.VocabSize {
		return fmt.Errorf("cuda: model: %d logits for %d rows of %d", len(logits), rows, m.cfg.VocabSize)
	}
	ids32 := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= m.cfg.VocabSize || id > math.MaxInt32 {
			return fmt.Errorf("cuda: model: token id %d at %d outside the vocabulary", id, i)
		}
		ids32[i] = int32(id)
	}
	if rows == 0 {
		logits = nil
	}
	return m.dev.call("model_forward", func() int { return cModelForward(m.h, ids32, rows == 1, logits) })
}

// setRows gives every state and cache n batch rows, all empty (position 0).
func (m *residentModel) setRows(n int) error {
	return m.dev.call("model_rows", func() int { return cModelRows(m.h, n) })
}

// batchRows gives the model n batch rows (nothing for one), refusing with
// the estimate when their caches and states would not fit beside it.
func (m *residentModel) batchRows(n int) error {
	if n == 1 {
		return nil
	}
	if n < 1 || n > MaxRows {
		return fmt.Errorf("cuda: %d batch rows: the device model takes 1 to %d", n, MaxRows)
	}
	need := estimateMemoryRows(m.cfg, m.f32, m.maxTokens, 1, 1, n).State
	if err := m.dev.checkFits(fmt.Sprintf("%d batch rows of caches and states for %d positions (%.2f GiB; %s lowers the positions)",
		n, m.maxTokens, float64(need)/(1<<30), MaxTokensEnv), need); err != nil {
		return err
	}
	return m.setRows(n)
}

// MaxRows is the most batch rows the device model takes (QR_MAX_ROWS of
// csrc/batch.cu).
const MaxRows = 1024

// forwardRows feeds ids[r] to batch row r (every row t tokens, as many rows
// as setRows gave) and writes each row's last `want` positions' logits (t,
// 1, or 0 for none) into logits, row after row. One token a row on the bf16
// model is one decode step of every row at once.
func (m *residentModel) forwardRows(ids [][]int, want int, logits []float32) error {
	if len(ids) == 0 || len(ids[0]) == 0 {
		return model.ErrEmpty
	}
	t := len(ids[0])
	if len(logits) != len(ids)*want*m.cfg.VocabSize {
		return fmt.Errorf("cuda: model: %d logits for %d rows of %d × %d", len(logits), len(ids), want, m.cfg.VocabSize)
	}
	ids32 := make([]int32, 0, len(ids)*t)
	for r, row := range ids {
		if len(row) != t {
			return fmt.Errorf("cuda: model: batch row %d has %d tokens, row 0 has %d", r, len(row), t)
		}
		for i, id := range row {
			if id < 0 || id >= m.cfg.VocabSize || id > math.MaxInt32 {
				return fmt.Errorf("cuda: model: token id %d at %d of batch row %d outside the vocabulary", id, i, r)
			}
			ids32 = append(ids32, int32(id))
		}
	}
	if want == 0 {
		logits = nil
	}
	return m.dev.call("model_forward_rows", func() int {
		return cModelForwardRows(m.h, ids32, len(ids), t, want == 1, logits)
	})
}

// lastDeviceTime is the device time of the last forward call (CUDA events
// from its inputs being on the device to its logits being ready there: no
// host copy inside); ok is false before the first call.
func (m *residentModel) lastDeviceTime() (d time.Duration, ok bool, err error) {
	var ms float32
	err = m.dev.call("model_last_ms", func() int {
		var rc int
		ms, rc = cModelLastMs(m.h)
		return rc
	})
	if err != nil || ms < 0 {
		return 0, false, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), true, nil
}

// Greedy decodes n tokens on the device, one CUDA-graph replay each (embed,
// every layer, lm_head, argmax feeding the next step), starting by feeding
// first at the current position. It returns the n chosen ids.
func (m *residentModel) Greedy(first, n int) ([]int, error) {
	if first < 0 || first >= m.cfg.VocabSize || n < 0 {
		return nil, fmt.Errorf("cuda: model: greedy from id %d for %d steps", first, n)
	}
	out := make([]int32, n)
	if err := m.dev.call("model_greedy", func() int { return cModelGreedy(m.h, int32(first), out) }); err != nil {
		return nil, err
	}
	ids := make([]int, n)
	for i, v := range out {
		ids[i] = int(v)
	}
	return ids, nil
}

// Layer runs decoder block i alone on x [t, H] (teacher forcing),
// continuing that block's own state and position, and returns its output;
// with rec set the block's stages are recorded under "layers.i.<stage>"
// minus the prefix, as model.Session.Layer records them.
func (m *residentModel) Layer(i int, x []float32, t int, rec tensor.Recorder) ([]float32, error) {
	h := m.cfg.HiddenSize
	if i < 0 || i >= m.cfg.NumLayers {
		return nil, fmt.Errorf("layer %d outside the model's %d layers", i, m.cfg.NumLayers)
	}
	if t <= 0 || len(x) != t*h {
		return nil, fmt.Errorf("cuda: layer %d: x has %d values, want %d·%d", i, len(x), t, h)
	}
	out := make([]float32, t*h)
	run := func() error {
		return m.dev.call("model_layer", func() int { return cModelLayer(m.h, i, x, t, out) })
	}
	if rec == nil {
		return out, run()
	}
	prefix := fmt.Sprintf("layers.%d.", i)
	err := m.traced(run, nil, func(name string, x *tensor.Tensor) { rec(strings.TrimPrefix(name, prefix), x) })
	return out, err
}

// forwardTraced runs ids like forward while the device records every
// stage, or only those named in only, and hands each to rec (names and
// shapes of the CPU recorder) before returning the logits.
func (m *residentModel) forwardTraced(ids []int, rows int, logits []float32, only []string, rec tensor.Recorder) error {
	return m.traced(func() error { return m.forward(ids, rows, logits) }, only, rec)
}

// traced runs f with the device recording stages (only those named in
// only, when it is not empty: the other ops keep their fused forms), then
// hands each to rec.
func (m *residentModel) traced(f func() error, only []string, rec tensor.Recorder) error {
	if err := m.dev.call("model_trace", func() int { return cModelTrace(m.h, true) }); err != nil {
		return err
	}
	defer m.dev.call("model_trace", func() int { return cModelTrace(m.h, false) })
	if len(only) > 0 {
		if err := m.dev.call("model_trace_only", func() int { return cModelTraceOnly(m.h, only) }); err != nil {
			return err
		}
	}
	if err := f(); err != nil {
		return err
	}
	var n int
	if err := m.dev.call("model_trace_count", func() int {
		var rc int
		n, rc = cModelTraceCount(m.h)
		return rc
	}); err != nil {
		return err
	}
	for i := range n {
		var name string
		var dims [3]int32
		if err := m.dev.call("model_trace_entry", func() int {
			var rc int
			name, dims, rc = cModelTraceEntry(m.h, i, nil)
			return rc
		}); err != nil {
			return err
		}
		shape := []int{}
		size := 1
		for _, d := range dims {
			if d > 0 {
				shape = append(shape, int(d))
				size *= int(d)
			}
		}
		x := tensor.New(shape...)
		if len(x.Data) != size {
			return fmt.Errorf("cuda: trace entry %s: shape %v", name, shape)
		}
		if err := m.dev.call("model_trace_entry", func() int {
			_, _, rc := cModelTraceEntry(m.h, i, x.Data)
			return rc
		}); err != nil {
			return err
		}
		rec(name, x)
	}
	return nil
}

// Reset empties every state and cache (position 0).
func (m *residentModel) Reset() error {
	return m.dev.call("model_reset", func() int { return cModelReset(m.h) })
}

// ModelMemory is what a Model holds on the device, in bytes.
type ModelMemory struct {
	Weights, State, Activations int64
}

// Info returns the current position and the device memory the model holds.
func (m *residentModel) Info() (pos int, mem ModelMemory, err error) {
	err = m.dev.call("model_info", func() int {
		var rc int
		pos, mem.Weights, mem.State, mem.Activations, rc = cModelInfo(m.h)
		return rc
	})
	return pos, mem, err
}

// Close frees the model's device memory. Calling it twice is harmless.
func (m *residentModel) Close() error {
	d := m.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.models[m]; !ok {
		return nil
	}
	delete(d.models, m)
	return d.callLocked("model_destroy", func() int { return cModelDestroy(m.h) })
}

// MemInfo returns the device's free and total memory (cudaMemGetInfo).
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.call("mem_info", func() int {
		var rc int
		free, total, rc = cMemInfo()
		return rc
	})
	return free, total, err
}
