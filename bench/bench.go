// Package bench measures what each backend's kernels cost, op by op and
// for the whole model, and how far their results are from the naive
// reference: the "fallback penalty" of running without fused kernels.
//
// A sweep runs ops × sequence lengths × backends. Each case gets the same
// deterministic inputs on every backend; it is timed by Method (warm-up,
// repeated runs, median/min/max), and its output is compared with the
// naive backend's on the same inputs when naive is cheap enough to run.
// Weights are random (model.RandomValues) unless a checkpoint is given, so
// no download is needed; per-layer ops build only the layers they run.
package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// Options configure a sweep.
type Options struct {
	Ops      []*Op
	Seqs     []int
	Backends []string // backend specs (model.ParseBackend), in order
	// Config is the shape to run (a named shape, a config.json, or the
	// checkpoint's). ShapeName labels it in the report.
	Config    *model.Config
	ShapeName string
	// Checkpoint, if set, supplies the weights (mmap'ed) instead of
	// random ones: op=model runs it whole, layer ops its first layers.
	Checkpoint *model.Model
	// Layers, if > 0, keeps only the first Layers decoder layers for op=model.
	Layers int
	// Vocab, if > 0, replaces the vocabulary size for op=model.
	Vocab int
	BF16  bool
	Seed  uint64
	// Batches lists the batch rows B that ops model and decode run with
	// (each row its own sequence and caches; nil: one row). Other ops run
	// one row.
	Batches []int
	// States is how many layers' states op decode-core cycles through
	// (0 or 1: one, which stays in cache; 48: the 27B's GDN layers).
	States int
	Method
	// NaiveMaxGFLOP skips the naive backend (timing and reference) for
	// cases whose work exceeds it; naive runs at about 1 GFLOP/s.
	NaiveMaxGFLOP float64
	// MaxMemBytes bounds the random weights built in memory.
	MaxMemBytes int64
	// Progress receives a line per case (nil: silent); TTY makes it one
	// updating line instead.
	Progress io.Writer
	TTY      bool
	// OnGroup, if set, is called with all results so far after each
	// (op, T) group, e.g. to save them as the sweep goes.
	OnGroup func([]Result) error

	backend func(name string) (*model.Backend, error) // Run's backend cache
}

// Result is one (op, T, backend) case. Absent numbers are NaN.
type Result struct {
	Op      string
	Backend string
	Seq     int
	// Rows is the batch rows B of a whole-model op (1 otherwise): each run
	// feeds every row T tokens (op model) or one (op decode).
	Rows int
	Stats
	// CPU is the median process CPU time of a run (all threads, user +
	// system; -1 if unknown): steadier than wall time on a shared machine.
	CPU time.Duration
	// Cold marks a single run without warm-up (it took longer than MaxTime).
	Cold bool
	// GFLOP is the work of one call by the op's formula; GFLOPS = GFLOP/median.
	GFLOP, GFLOPS float64
	// GBPS is the least traffic over the median, for memory-bound ops (else NaN).
	GBPS float64
	// Penalty is Median over the fastest backend's median at this op and T.
	Penalty float64
	// MaxAbsVsNaive and RelL2VsNaive compare the output with naive's on the
	// same inputs (NaN when naive was not run; Note says why).
	MaxAbsVsNaive, RelL2VsNaive float64
	// Skipped says why the case did not run ("" if it ran).
	Skipped string
	Note    string
	// Ceiling is the backend's device's peak (zero on the CPU: the report
	// uses the CPU's).
	Ceiling model.Ceiling
}

// Ran reports whether the case was timed.
func (r Result) Ran() bool { return r.Skipped == "" }

// validate checks the options before any work.
func (o *Options) validate() error {
	if len(o.Ops) == 0 {
		return errors.New("no ops")
	}
	if len(o.Seqs) == 0 {
		return errors.New("no sequence lengths")
	}
	for _, t := range o.Seqs {
		if t <= 0 {
			return fmt.Errorf("sequence length %d must be positive", t)
		}
	}
	for _, b := range o.Batches {
		if b < 1 || b > MaxBatch {
			return fmt.Errorf("batch rows %d: want 1 to %d", b, MaxBatch)
		}
	}
	if len(o.Batches) > 0 && !slices.Equal(o.Batches, []int{1}) && !slices.ContainsFunc(o.Ops, func(op *Op) bool { return op.wholeModel }) {
		return errors.New("batch rows apply to ops model and decode, and none is listed")
	}
	if len(o.Backends) == 0 {
		return errors.New("no backends")
	}
	if o.Config == nil {
		return errors.New("no config")
	}
	if o.Reps < 1 {
		return fmt.Errorf("reps %d must be at least 1", o.Reps)
	}
	if o.Warmup < 0 {
		return fmt.Errorf("warm-up count %d must not be negative", o.Warmup)
	}
	return nil
}

// Run performs the sweep and returns one Result per (op, T, backend), in
// that order.
func Run(o Options) ([]Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	bes := map[string]*model.Backend{}
	var getBackend func(name string) (*model.Backend, error)
	getBackend = func(name string) (*model.Backend, error) {
		if b, ok := bes[name]; ok {
			return b, nil
		}
		b, err := model.ParseBackend(name)
		if err != nil {
			return nil, err
		}
		bes[name] = b
		return b, nil
	}
	defer func() {
		for _, b := range bes {
			b.Close()
		}
	}()
	o.backend = getBackend
	// Create the listed backends up front, so a broken one fails fast, and
	// say where one runs the shape another way than it would.
	for _, n := range o.Backends {
		be, err := getBackend(n)
		if err != nil {
			return nil, err
		}
		if err := be.Supports(o.Config); err != nil && o.Progress != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(o.Progress, "bench: backend %s at shape %s: %s\n", n, o.ShapeName, line)
			}
		}
	}

	ops, err := applicableOps(o.Ops, o.Config)
	if err != nil {
		return nil, err
	}
	o.Ops = ops
	most, err := o.checkCases()
	if err != nil {
		return nil, err
	}
	o.announce()
	prog := newProgress(o.Progress, o.TTY, o.Method)
	defer prog.finish()
	prog.plan(o.plan())

	var results []Result
	var layerWS *workspace
	for _, op := range o.Ops {
		ws, err := o.workspaceFor(op, &layerWS)
		if err != nil {
			return nil, fmt.Errorf("op %s: %w", op.Name, err)
		}
		// Hold the op's cases to the sweep's largest estimate over what is
		// held now (its weights built), so the garbage a case makes between
		// collections cannot carry it past its estimate.
		model.BoundHeap(most)
		for _, rows := range o.rowsFor(op) {
			ws.rows = rows
			for _, t := range o.Seqs {
				group, err := o.runGroup(op, ws, t, getBackend, prog)
				if err != nil {
					if rows > 1 {
						return nil, fmt.Errorf("op %s T=%d, %d batch rows: %w", op.Name, t, rows, err)
					}
					return nil, fmt.Errorf("op %s T=%d: %w", op.Name, t, err)
				}
				results = append(results, group...)
				if o.OnGroup != nil {
					if err := o.OnGroup(results); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	noteBatchSpeedups(results)
	return results, nil
}

// rowsFor lists the batch rows op runs with: Batches for the whole-model
// ops, one row otherwise.
func (o *Options) rowsFor(op *Op) []int {
	if op.wholeModel && len(o.Batches) > 0 {
		return o.Batches
	}
	return []int{1}
}

// tokensPerRun is how many tokens one run of a whole-model op feeds (0 for
// the other ops): T a row for op model, one a row for op decode.
func tokensPerRun(op string, t, rows int) int {
	switch op {
	case "model":
		return t * rows
	case "decode":
		return rows
	}
	return 0
}

// noteBatchSpeedups adds to each batched whole-model result its tokens/s
// over the one-row result of the same op, T and backend, when the sweep has
// one.
func noteBatchSpeedups(results []Result) {
	for i := range results {
		r := &results[i]
		if r.Rows <= 1 || !r.Ran() || r.Median <= 0 {
			continue
		}
		for _, one := range results {
			if one.Rows == 1 && one.Ran() && one.Op == r.Op && one.Seq == r.Seq && one.Backend == r.Backend && one.Median > 0 {
				rate := float64(tokensPerRun(r.Op, r.Seq, r.Rows)) / r.Median.Seconds()
				rate1 := float64(tokensPerRun(one.Op, one.Seq, 1)) / one.Median.Seconds()
				r.Note = joinNote(r.Note, fmt.Sprintf("%.2f× the tokens/s of one row", rate/rate1))
				break
			}
		}
	}
}

// runGroup measures every backend on one (op, T).
func (o *Options) runGroup(op *Op, ws *workspace, t int, getBackend func(string) (*model.Backend, error), prog *progress) ([]Result, error) {
	rows := max(ws.rows, 1)
	gflop := op.FLOP(ws.cfg, t) * float64(rows) / 1e9
	make1, err := op.prepare(ws, t, o.Seed)
	if err != nil {
		return nil, err
	}
	naiveOK := gflop <= o.NaiveMaxGFLOP
	whyNoRef := fmt.Sprintf("naive skipped: %.3g GFLOP > --naive-max-gflop %g", gflop, o.NaiveMaxGFLOP)
	if ws.deviceWeights {
		naiveOK, whyNoRef = false, deviceWeightsNote(o.Seed)
	}

	names := naiveFirst(o.Backends)
	var ref []float32
	if naiveOK && names[0] != "naive" {
		be, err := getBackend("naive")
		if err != nil {
			return nil, err
		}
		inst := make1(be)
		prog.start(op.Name, t, "naive", "reference run")
		inst.reset()
		t0 := time.Now()
		if err := inst.run(); err != nil {
			return nil, fmt.Errorf("naive reference: %w", err)
		}
		prog.done(op.Name, t, "naive", gflop, []time.Duration{time.Since(t0)}, "reference")
		ref = inst.output()
	}

	// Every backend that runs gets its instance now: they take turns.
	group := make([]Result, len(names))
	var insts []instance
	var idx []int // group index of each instance
	for g, name := range names {
		group[g] = Result{Op: op.Name, Backend: name, Seq: t, Rows: rows, GFLOP: gflop,
			GFLOPS: math.NaN(), GBPS: math.NaN(), Penalty: math.NaN(), MaxAbsVsNaive: math.NaN(), RelL2VsNaive: math.NaN()}
		if name == "naive" && !naiveOK {
			group[g].Skipped = whyNoRef
			prog.skip(op.Name, t, name, whyNoRef)
			continue
		}
		be, err := getBackend(name)
		if err != nil {
			return nil, err
		}
		insts, idx = append(insts, make1(be)), append(idx, g)
	}
	defer closeInstances(insts)
	var running []string
	for _, g := range idx {
		running = append(running, names[g])
	}
	prog.start(op.Name, t, strings.Join(running, ", "), "")
	tms, err := measureGroup(insts, o.Method, func(k, i int) { prog.tick(names[idx[k]], i) })
	if err != nil {
		return nil, err
	}
	devStats := make([]*Stats, len(insts))
	devNotes := make([]string, len(insts))
	devElem := make([]int, len(insts)) // activation bytes of a device-timed run (0: float32)
	for k, g := range idx {
		be, _ := getBackend(names[g])
		if be.Device == nil || be.Device.Time == nil || ws.cfg == nil {
			continue
		}
		tm, err := be.Device.Time(op.Name, ws.cfg, t)
		switch {
		case errors.Is(err, model.ErrUnsupportedShape):
			devNotes[k] = fmt.Sprintf("host clock (host copies included): no device time at this shape (%v)", err)
		case err != nil:
			return nil, fmt.Errorf("%s device timing: %w", names[g], err)
		case tm != nil:
			devStats[k] = &Stats{Median: tm.Median, Min: tm.Min, Max: tm.Max, Runs: tm.Runs}
			devElem[k] = tm.ElemBytes
		}
	}
	for k, g := range idx {
		prog.done(op.Name, t, names[g], gflop, tms[k].samples, "")
		if names[g] == "naive" {
			ref = insts[k].output()
		}
	}
	for k, g := range idx {
		r := &group[g]
		r.Stats, _ = Summarize(tms[k].samples)
		r.Cold, r.CPU = tms[k].cold, -1
		if be, _ := getBackend(names[g]); be.Device != nil {
			r.Ceiling = be.Device.Ceiling
		}
		r.Note = joinNote(r.Note, devNotes[k])
		if devStats[k] != nil {
			r.Stats, r.Cold = *devStats[k], false
			r.Note = joinNote(r.Note, "device time: CUDA events, inputs generated on the device, no host copies timed; deltas from the host-copy call of the same op")
		} else if dev := tms[k].dev; len(dev) > 0 && len(dev) == len(tms[k].samples) {
			host := r.Stats
			r.Stats, _ = Summarize(dev)
			r.Note = joinNote(r.Note, fmt.Sprintf("device time: CUDA events around each call's work on the device (inputs there to logits ready there, no host copies); "+
				"host clock per call, logits to the host included: %s (%s – %s)", fmtDur(host.Median), fmtDur(host.Min), fmtDur(host.Max)))
		} else if !slices.Contains(tms[k].cpu, -1) {
			c, _ := Summarize(tms[k].cpu)
			r.CPU = c.Median
		}
		if sec := r.Median.Seconds(); sec > 0 {
			r.GFLOPS = gflop / sec
			if op.Bytes != nil {
				elem := 4
				if devStats[k] != nil && devElem[k] > 0 {
					elem = devElem[k]
				}
				r.GBPS = op.Bytes(ws.cfg, t, elem) / 1e9 / sec
			}
		}
		if n := tokensPerRun(op.Name, t, rows); n > 0 && r.Median > 0 {
			r.Note = joinNote(r.Note, fmt.Sprintf("%.4g tokens/s (%s)", float64(n)/r.Median.Seconds(), plural(rows, "row")))
		}
		if ref == nil {
			r.Note = joinNote(r.Note, whyNoRef)
		} else {
			out := insts[k].output()
			r.MaxAbsVsNaive = tensor.MaxAbsDiff(out, ref)
			r.RelL2VsNaive = tensor.RelL2(out, ref)
			if math.IsInf(r.RelL2VsNaive, 0) || math.IsNaN(r.RelL2VsNaive) {
				r.Note = "output is non-finite or the wrong length"
			}
		}
		if r.Cold {
			r.Note = joinNote(r.Note, "single cold run (it took longer than --max-time)")
		}
	}
	setPenalties(group)
	return group, nil
}

// deviceWeightsNote marks whole-model results on weights the backend
// generated on its device (model.NewRandomRunner).
func deviceWeightsNote(seed uint64) string {
	return fmt.Sprintf("weights generated on the device from --seed %d (no host copy, so no naive reference)", seed)
}

// closeInstances releases what instances hold (a device model's memory).
func closeInstances(insts []instance) {
	for _, in := range insts {
		if c, ok := in.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

// naiveFirst moves naive to the front, so its output is the reference for
// the backends after it.
func naiveFirst(names []string) []string {
	names = slices.Clone(names)
	if i := slices.Index(names, "naive"); i > 0 {
		names = append([]string{"naive"}, slices.Delete(names, i, i+1)...)
	}
	return names
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// setPenalties divides each median by the fastest one in the group.
func setPenalties(group []Result) {
	best := time.Duration(math.MaxInt64)
	for _, r := range group {
		if r.Ran() && r.Median > 0 && r.Median < best {
			best = r.Median
		}
	}
	for i := range group {
		if group[i].Ran() && best < math.MaxInt64 {
			group[i].Penalty = float64(group[i].Median) / float64(best)
		}
	}
}

// plan lists the cases for the progress ETA.
func (o *Options) plan() []planned {
	var p []planned
	for _, op := range o.Ops {
		c := o.Config
		if op.wholeModel {
			c = o.modelConfig()
		}
		for _, rows := range o.rowsFor(op) {
			for _, t := range o.Seqs {
				g := op.FLOP(c, t) * float64(rows) / 1e9
				naiveOK := g <= o.NaiveMaxGFLOP
				if naiveOK && !slices.Contains(o.Backends, "naive") {
					p = append(p, planned{op: op.Name, backend: "naive", gflop: g, runs: 1})
				}
				for _, b := range naiveFirst(o.Backends) {
					if b == "naive" && !naiveOK {
						continue
					}
					p = append(p, planned{op: op.Name, backend: b, gflop: g})
				}
			}
		}
	}
	return p
}

// deviceWeights reports whether every listed backend generates random
// weights itself (then op model and decode build none on the host).
func (o *Options) deviceWeights() bool {
	if o.Checkpoint != nil || o.backend == nil {
		return false
	}
	for _, n := range o.Backends {
		be, err := o.backend(n)
		if err != nil || !model.HasRandomRunner(be) {
			return false
		}
	}
	return true
}

// modelConfig is the config op=model runs: the checkpoint's, or the
// shape cut to Layers layers and Vocab tokens.
func (o *Options) modelConfig() *model.Config {
	if o.Checkpoint != nil {
		return o.Checkpoint.Config
	}
	c := *o.Config
	if o.Layers > 0 && o.Layers < c.NumLayers {
		c.NumLayers = o.Layers
		c.LayerTypes = slices.Clone(c.LayerTypes[:o.Layers])
	}
	if o.Vocab > 0 {
		c.VocabSize = o.Vocab
		c.EOSTokenIDs = nil
	}
	return &c
}

// workspaceFor returns the workspace op runs in, building weights only
// when the op needs them. Layer ops share one workspace (*layerWS); the
// whole model gets its own, built after the layer workspace is dropped.
// Without a checkpoint, when every backend generates random weights itself
// (model.HasRandomRunner: the cuda backend, on the GPU), no host weights
// are built and each runner makes its own from the seed.
func (o *Options) workspaceFor(op *Op, layerWS **workspace) (*workspace, error) {
	if op.wholeModel {
		*layerWS = nil
		runtime.GC()
		if o.Checkpoint != nil {
			return &workspace{cfg: o.Checkpoint.Config, m: o.Checkpoint, states: o.States}, nil
		}
		c := o.modelConfig()
		// Validated first: a --vocab or config past the limits would make
		// the weights' size overflow the estimate below.
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("shape %s: %w", o.ShapeName, err)
		}
		if o.deviceWeights() {
			return &workspace{cfg: c, states: o.States, deviceWeights: true, seed: o.Seed}, nil
		}
		if err := o.checkMemory(c, "op model"); err != nil {
			return nil, err
		}
		m, err := model.NewRandom(c, o.Seed, o.BF16)
		if err != nil {
			return nil, err
		}
		return &workspace{cfg: c, m: m, states: o.States}, nil
	}
	if len(op.kinds) == 0 {
		return &workspace{cfg: o.Config, states: o.States}, nil
	}
	if *layerWS != nil {
		return *layerWS, nil
	}
	ws, err := o.layerWorkspace()
	if err != nil {
		return nil, err
	}
	*layerWS = ws
	return ws, nil
}

// layerWorkspace builds one block of each kind the selected ops need: from
// the checkpoint (its first block of the kind) or as a random model of
// just those blocks with a token vocabulary of 16, which costs nothing.
func (o *Options) layerWorkspace() (*workspace, error) {
	var kinds []model.LayerKind
	for _, op := range o.Ops {
		if op.wholeModel {
			continue
		}
		for _, k := range op.kinds {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	ws := &workspace{cfg: o.Config}
	if o.Checkpoint != nil {
		ws.m = o.Checkpoint
	} else {
		c := *o.Config
		c.LayerTypes, c.NumLayers = kinds, len(kinds)
		c.VocabSize, c.TieWordEmbeddings, c.EOSTokenIDs = 16, true, nil
		if err := o.checkMemory(&c, "layer ops"); err != nil {
			return nil, err
		}
		m, err := model.NewRandom(&c, o.Seed, o.BF16)
		if err != nil {
			return nil, err
		}
		ws.m = m
	}
	ws.blocks = map[model.LayerKind]*model.Block{}
	for i := range ws.m.Blocks {
		b := &ws.m.Blocks[i]
		if ws.blocks[b.Kind] == nil {
			ws.blocks[b.Kind] = b
		}
	}
	return ws, nil
}

// WeightBytes estimates the memory of c's weights held in memory.
func WeightBytes(c *model.Config, bf16 bool) int64 {
	per := int64(4)
	if bf16 {
		per = 2
	}
	return c.TextParams() * per
}

func (o *Options) checkMemory(c *model.Config, what string) error {
	need := WeightBytes(c, o.BF16)
	if o.MaxMemBytes <= 0 || need <= o.MaxMemBytes {
		return nil
	}
	dt := "f32"
	if o.BF16 {
		dt = "bf16"
	}
	return fmt.Errorf("%s at shape %s needs %.1f GiB of random %s weights in memory (%d layers, vocab %d), over the %.1f GiB limit (--max-memory); "+
		"run fewer layers with --layers N (e.g. --layers 4), a smaller vocabulary with --vocab, or a checkpoint from disk with --model DIR (mmap'ed)",
		what, o.ShapeName, float64(need)/(1<<30), dt, c.NumLayers, c.VocabSize, float64(o.MaxMemBytes)/(1<<30))
}
