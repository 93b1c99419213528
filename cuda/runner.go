package cuda

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// MaxTokensEnv overrides the KV-cache capacity (positions) of the
// device-resident runner; the default is the model's context length capped
// at DefaultMaxTokens.
const MaxTokensEnv = "QWENREF_CUDA_MAX_TOKENS"

// DefaultMaxTokens caps the default KV-cache capacity: 32768 positions are
// 2 GiB of cache on the 27B, 0.4 GiB on the 0.8B.
const DefaultMaxTokens = 32768

// MoEDecodeShapeEnv picks the launch shape of the bf16 model's decode
// expert GEMVs, 0 to MoEDecodeShapes-1 (rows per warp and loads in flight,
// csrc/moe_decode.cu), and GEMVShapeEnv that of its other decode GEMVs
// (the projections, the dense MLP, the router and the head, csrc/gemv.cu),
// 0 to GEMVShapes-1. Every shape gives the same bits; the defaults are the
// ones measured fastest on the H200.
const (
	MoEDecodeShapeEnv = "QWENREF_CUDA_MOE_DECODE_SHAPE"
	GEMVShapeEnv      = "QWENREF_CUDA_GEMV_SHAPE"
)

// MoEDecodeShapes and GEMVShapes count those shapes (QR_MOE_DECODE_SHAPES,
// QR_GEMV_SHAPES).
const (
	MoEDecodeShapes = 4
	GEMVShapes      = 4
)

// The shapes used when the variables are unset.
const (
	defaultMoEDecodeShape = 2
	defaultGEMVShape      = 0
)

// launchShape reads env: a shape from 0 to n-1, or def when unset.
func launchShape(env string, n, def int) (int, error) {
	s := os.Getenv(env)
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v >= n {
		return 0, fmt.Errorf("cuda: %s=%q: want a launch shape from 0 to %d", env, s, n-1)
	}
	return v, nil
}

var errBusy = errors.New("cuda runner used from two goroutines at once: make one runner per goroutine")

// deviceRunner is model.Runner on the model resident on the device. Each
// row keeps its caches and states on the device across calls (prefill, then
// decode steps as CUDA-graph replays). With B > 1 rows a prefill runs row
// after row, and a decode step (one token a row) runs every row at once on
// the bf16 model: GEMMs over the rows and the decode kernels over rows ×
// heads, one graph replay (the fp32 model steps its rows in turn). With
// RunOptions.Record (one row only) the device records every stage the CPU
// recorder names (the prefill path runs for every call then, decode
// included), so trace --compare names the first divergent stage. With an
// fp32 model (gm.f32) it is the cuda-fp32 runner.
type deviceRunner struct {
	mu        sync.Mutex
	hm        *model.Model
	gm        *residentModel
	rows      int
	maxTokens int
	pos       int
	devTime   time.Duration // device time of the last Forward (every row), CUDA events
	devOK     bool
}

func maxTokensFor(cfg *model.Config) (int, error) {
	if s := os.Getenv(MaxTokensEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1<<24 {
			return 0, fmt.Errorf("cuda: %s=%q: want a whole number of positions from 1 to %d", MaxTokensEnv, s, 1<<24)
		}
		return n, nil
	}
	return min(max(cfg.MaxPositionEmbeddings, 1), DefaultMaxTokens), nil
}

// newDeviceRunner uploads hm and runs it resident on the device: the bf16
// model, or the fp32 one when f32.
func newDeviceRunner(d *Device, hm *model.Model, rows int, f32 bool) (model.Runner, error) {
	if rows < 1 {
		return nil, fmt.Errorf("a runner needs at least one row, not %d", rows)
	}
	c := hm.Config
	if f32 {
		if err := SupportsResidentFP32(c); err != nil {
			return nil, err
		}
	} else if SupportsResident(c) != nil {
		// The tiny test checkpoints have other head dims: they still run on
		// the GPU, op by op (cuda-ops); the backend's Supports says why.
		return model.NewRunner(hm, &model.Backend{Name: BackendName, MatMul: MatMul{d}, Conv: Conv{d},
			Delta: GatedDelta{d, Auto}, Attn: Attention{d}, Precision: model.PrecisionBF16}, rows)
	}
	maxTok, err := maxTokensFor(c)
	if err != nil {
		return nil, err
	}
	var progress func(done, total int64)
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		progress = func(done, total int64) {
			fmt.Fprintf(os.Stderr, "\rcuda: uploading weights to %s: %3.0f%% of %.2f GiB", d.Name(),
				100*float64(done)/float64(max(total, 1)), float64(total)/(1<<30))
			if done >= total {
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	gm, err := d.uploadModelProgress(hm, maxTok, f32, progress)
	if err != nil {
		return nil, err
	}
	if err := gm.batchRows(rows); err != nil {
		gm.Close()
		return nil, err
	}
	return &deviceRunner{hm: hm, gm: gm, rows: rows, maxTokens: maxTok}, nil
}

// newRandomDeviceRunner is model.NewRandomRunner on the device: a model of
// cfg's shape whose weights the GPU generates from seed (newRandomModel),
// so a 64-layer 27B runs with no host copy of its 54 GB of weights.
func newRandomDeviceRunner(d *Device, cfg *model.Config, seed uint64, rows int, f32 bool) (model.Runner, error) {
	if rows < 1 {
		return nil, fmt.Errorf("a runner needs at least one row, not %d", rows)
	}
	supports := SupportsResident
	if f32 {
		supports = SupportsResidentFP32
	}
	if err := supports(cfg); err != nil {
		return nil, err
	}
	maxTok, err := maxTokensFor(cfg)
	if err != nil {
		return nil, err
	}
	gm, err := d.newRandomModel(cfg, seed, maxTok, f32)
	if err != nil {
		return nil, err
	}
	if err := gm.batchRows(rows); err != nil {
		gm.Close()
		return nil, err
	}
	// The host model carries the config only: the runner reads nothing else.
	return &deviceRunner{hm: &model.Model{Config: cfg}, gm: gm, rows: rows, maxTokens: maxTok}, nil
}

// SupportsResident returns nil when the device-resident model's kernels
// cover cfg's head dims (GDN 128/128, attention 256: every released
// Qwen3.5/3.6 size), or else why not; the cuda backend then runs that
// model op by op, as cuda-ops. It is the "cuda" backend's Device.Supports.
func SupportsResident(cfg *model.Config) error {
	if cfg.LinearKeyHeadDim != 128 || cfg.LinearValueHeadDim != 128 || cfg.HeadDim != 256 {
		return model.UnsupportedShape("the device-resident model needs GDN head dims 128/128 and attention head dim 256 (every released Qwen3.5/3.6 size); "+
			"this shape has %d/%d and %d, so it runs op by op (as %s, slow)", cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim, cfg.HeadDim, OpsBackendName)
	}
	if err := supportsRouter(cfg); err != nil {
		return err
	}
	if m := cfg.MoE; cfg.IsMoE() {
		const maxWidth = 24576 // the GEMV's K
		switch {
		case m.IntermediateSize%8 != 0 || m.SharedIntermediate%8 != 0 || m.SharedIntermediate > maxWidth || cfg.HiddenSize > maxWidth:
			return model.UnsupportedShape("the device MoE kernels need expert widths that are multiples of 8 (shared and hidden up to %d); "+
				"this model has moe_intermediate_size %d, shared_expert_intermediate_size %d, hidden_size %d",
				maxWidth, m.IntermediateSize, m.SharedIntermediate, cfg.HiddenSize)
		}
	}
	return nil
}

// SupportsResidentFP32 returns nil when the fp32 resident model (cuda-fp32)
// takes cfg, or else why not: its kernels take any GDN key head dim up to
// 1024, attention head dims up to 256 with an even rotary dim, and the
// device router's expert limits. It is the "cuda-fp32" backend's
// Device.Supports.
func SupportsResidentFP32(cfg *model.Config) error {
	const maxDK, maxHD = 1024, 256 // csrc/model.cu, DevModel::create; ATT_MAXD of csrc/attn.cu
	if cfg.LinearKeyHeadDim > maxDK || cfg.HeadDim > maxHD || cfg.RotaryDim()%2 != 0 {
		return model.UnsupportedShape("the fp32 device model takes GDN key head dims up to %d and attention head dims up to %d "+
			"with an even rotary dim; this shape has %d, %d and %d", maxDK, maxHD, cfg.LinearKeyHeadDim, cfg.HeadDim, cfg.RotaryDim())
	}
	return supportsRouter(cfg)
}

// supportsRouter refuses an MoE config the device router (either
// precision) cannot take: its expert and top-k limits.
func supportsRouter(cfg *model.Config) error {
	const maxExperts, maxTopK = 8192, 64 // MOE_MAX_EXPERTS, MOE_MAX_TOPK of csrc/model.cuh
	if m := cfg.MoE; cfg.IsMoE() && (m.NumExperts > maxExperts || m.NumExpertsPerTok > maxTopK) {
		return model.UnsupportedShape("the device router takes up to %d experts and top-%d; this model has %d and top-%d",
			maxExperts, maxTopK, m.NumExperts, m.NumExpertsPerTok)
	}
	return nil
}

// LastDeviceTime is the device time of the last Forward, summed over its
// rows: CUDA events from the inputs being on the device to the logits
// being ready there, so no host copy is inside. ok is false before the
// first call and after a traced one (qwenref bench reports it beside its
// host clock).
func (r *deviceRunner) LastDeviceTime() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.devTime, r.devOK
}

func (r *deviceRunner) Rows() int { return r.rows }
func (r *deviceRunner) Backend() string {
	if r.gm.f32 {
		return FP32BackendName
	}
	return BackendName
}
func (r *deviceRunner) Close() error { return r.gm.Close() }

func (r *deviceRunner) Pos() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pos
}

func (r *deviceRunner) Reset() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos = 0
	return r.gm.Reset()
}

func (r *deviceRunner) Layer(i int, x []float32, t int, rec tensor.Recorder) ([]float32, error) {
	if !r.mu.TryLock() {
		return nil, errBusy
	}
	defer r.mu.Unlock()
	if err := r.checkActivations(t, 0); err != nil {
		return nil, err
	}
	return r.gm.Layer(i, x, t, rec)
}

func (r *deviceRunner) Forward(ids [][]int, opt model.RunOptions) (*tensor.Tensor, error) {
	if !r.mu.TryLock() {
		return nil, errBusy
	}
	defer r.mu.Unlock()
	t, err := model.CheckBatch(r.hm, ids, r.rows)
	if err != nil {
		return nil, err
	}
	if opt.Record != nil && r.rows > 1 {
		return nil, errors.New("stage recording needs a single-row runner")
	}
	if len(opt.Segments) > 1 {
		return nil, fmt.Errorf("backend %s cannot pack samples into one row yet (RunOptions.Segments): run them one at a time, or pack on a CPU backend", r.Backend())
	}
	if r.pos+t > r.maxTokens {
		return nil, fmt.Errorf("cuda: %d tokens at position %d exceed the KV cache of %d positions (set %s to raise it)",
			t, r.pos, r.maxTokens, MaxTokensEnv)
	}
	want := 0
	switch opt.Logits {
	case model.AllLogits:
		want = t
	case model.LastLogits:
		want = 1
	}
	if err := r.checkActivations(max(t, r.rows), max(want, r.rows)); err != nil {
		return nil, err
	}
	v := r.hm.Config.VocabSize
	var out *tensor.Tensor
	if want > 0 {
		out = opt.OutTensor(r.rows, want, v)
	}
	r.devTime, r.devOK = 0, opt.Record == nil // a traced call copies stages inside: not a device time
	if r.rows > 1 {
		var dst []float32
		if out != nil {
			dst = out.Data
		}
		if err := r.gm.forwardRows(ids, want, dst); err != nil {
			return nil, err
		}
		d, ok, err := r.gm.lastDeviceTime()
		if err != nil {
			return nil, err
		}
		r.devTime, r.devOK = d, ok
		r.pos += t
		return out, nil
	}
	for b, row := range ids {
		var dst []float32 // this row's logits, written by the library in place
		if out != nil {
			dst = out.Data[b*want*v : (b+1)*want*v]
		}
		var err error
		if opt.Record != nil && r.rows == 1 {
			err = r.gm.forwardTraced(row, want, dst, opt.RecordOnly, opt.Record)
		} else {
			err = r.gm.forward(row, want, dst)
		}
		if err != nil {
			if r.rows > 1 {
				err = fmt.Errorf("batch row %d: %w", b, err)
			}
			return nil, err
		}
		if r.devOK {
			d, ok, err := r.gm.lastDeviceTime()
			if err != nil {
				return nil, err
			}
			r.devTime, r.devOK = r.devTime+d, ok
		}
	}
	r.pos += t
	if opt.Record != nil && out != nil {
		opt.Record("logits", &tensor.Tensor{Shape: []int{want, v}, Data: out.Data})
	}
	return out, nil
}

// checkActivations refuses a prefill whose activation buffers would not
// fit, with the estimate, before the library tries to grow them.
func (r *deviceRunner) checkActivations(t, logitRows int) error {
	_, mem, err := r.gm.Info()
	if err != nil {
		return err
	}
	need := estimateMemory(r.hm.Config, r.gm.f32, r.maxTokens, t, logitRows).Activations
	if need <= mem.Activations {
		return nil
	}
	return r.gm.dev.checkFits(fmt.Sprintf("a prefill of %d tokens (%.2f GiB more activations)", t,
		float64(need-mem.Activations)/(1<<30)), need-mem.Activations)
}
