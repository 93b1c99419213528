package features

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// Options say what Run captures and where it writes.
type Options struct {
	Model   *model.Model
	Runner  model.Runner // one row, on the backend named by Backend
	Backend string
	// Precision is the backend's (model.Backend.Precision): "bf16" when its
	// matrix products round their operands to bf16. Check's default bar
	// follows it.
	Precision string
	ModelDir  string // the checkpoint directory ("" for the bundled demo), hashed into the manifest
	Data      string // the JSONL file
	Out       string // the output directory (created if absent)
	Layers    []Tap
	DType     string // "BF16" (default) or "F32"
	Format    string // FormatShards (default) or FormatSpeculators
	Prep      *Preparer
	OnError   string // "fail" (default) or "skip"
	Rank      int
	World     int   // 0 or 1: no split
	Shard     int64 // target bytes of features per shard (default 1 GiB)
	Progress  io.Writer
	// FreeBytes reports the free space at a path (safeio.FreeBytes when nil).
	FreeBytes func(string) (int64, bool)
	// AfterCommit, if set, runs after each manifest update (tests stop a
	// run there to resume it).
	AfterCommit func(m *Manifest) error
	// PackTokens, if > 0, packs consecutive samples of up to this many
	// tokens in all into one forward (model.RunOptions.Segments); a
	// longer sample runs alone. The files are byte-identical to an
	// unpacked run's. 0: one forward per sample.
	PackTokens int
	// CheckMemory, if set, is given what the run will hold beyond the
	// weights (MemoryBytes, at the longest sample or pack the data holds)
	// once the data is read and before any forward; an error stops the run.
	CheckMemory func(need int64, what string) error
}

// DefaultShardBytes is the default shard size: a shard is held in memory
// (as float32) before it is written.
const DefaultShardBytes = 1 << 30

func (o *Options) defaults() {
	if o.DType == "" {
		o.DType = "BF16"
	}
	if o.Format == "" {
		o.Format = FormatShards
	}
	if o.OnError == "" {
		o.OnError = "fail"
	}
	if o.World < 1 {
		o.World = 1
	}
	if o.Shard <= 0 {
		o.Shard = DefaultShardBytes
	}
	if o.FreeBytes == nil {
		o.FreeBytes = safeio.FreeBytes
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

func dtypeBytes(dt string) int64 {
	if dt == "F32" {
		return 4
	}
	return 2
}

// Run captures the features of every sample of o.Data that belongs to
// o.Rank, resuming the run recorded in o.Out's manifest if there is one.
func Run(o Options) (*Manifest, error) {
	o.defaults()
	if o.DType != "BF16" && o.DType != "F32" {
		return nil, fmt.Errorf("--dtype %s: want bf16 or f32", strings.ToLower(o.DType))
	}
	if o.OnError != "skip" && o.OnError != "fail" {
		return nil, fmt.Errorf("--on-error %s: want skip or fail", o.OnError)
	}
	if o.PackTokens < 0 {
		return nil, fmt.Errorf("--pack-tokens %d: want ≥ 0", o.PackTokens)
	}
	if o.Rank < 0 || o.Rank >= o.World {
		return nil, fmt.Errorf("--rank %d: want 0 ≤ rank < --world-size %d", o.Rank, o.World)
	}
	if len(o.Layers) == 0 {
		return nil, errors.New("no layers to capture")
	}
	cfg := o.Model.Config
	want := &Manifest{Format: o.Format, Model: o.ModelDir, Data: o.Data, Layers: o.Layers, Convention: Convention,
		DType: o.DType, Hidden: cfg.HiddenSize, NumLayers: cfg.NumLayers, MaxLen: o.Prep.MaxLen,
		Rank: o.Rank, WorldSize: o.World, ShardBytes: o.Shard, Backend: o.Backend, Precision: o.Precision}
	var err error
	if want.ModelFiles, err = modelFiles(o.ModelDir); err != nil {
		return nil, err
	}
	if want.DataSHA256, err = FileSHA256(o.Data); err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	_, statErr := os.Lstat(o.Out)
	if err := os.MkdirAll(o.Out, 0o777); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	unlock, err := lockOut(o.Out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	m, err := ReadManifest(o.Out)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = want
	} else if k := differs(m, want); k != "" {
		return nil, fmt.Errorf("--out %s holds a run with another %s: resume it with the same settings, or use another directory", safeio.Clean(o.Out), k)
	} else if m.Complete {
		fmt.Fprintf(o.Progress, "features: %s is complete (%d samples)\n", safeio.Clean(o.Out), m.SamplesDone)
		return m, nil
	}
	w := &writer{o: o, m: m, start: time.Now()}
	if err := w.plan(); err != nil {
		if errors.Is(statErr, fs.ErrNotExist) {
			_ = os.Remove(o.Out) // a run refused before its first write leaves no directory it made (Remove takes only an empty one)
		}
		return nil, err
	}
	fmt.Fprintf(o.Progress, "features: %d samples (%d tokens) to capture into %s%s\n", w.planned, w.tokens, safeio.Clean(o.Out), w.memNote)
	err = eachSample(o, m.NextIndex, func(line []byte, index, lineNo int) error { return w.sample(line, index, lineNo) })
	if err == nil {
		err = w.runPack()
	}
	if err != nil {
		return nil, err
	}
	if err := w.flush(true); err != nil {
		return nil, err
	}
	w.progress(true)
	return m, nil
}

// eachSample calls fn with the lines of o.Data that are o.Rank's samples
// from index from on.
func eachSample(o Options, from int, fn func(line []byte, index, lineNo int) error) error {
	f, _, err := safeio.Open(o.Data)
	if err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	defer f.Close()
	err = Lines(f, func(line []byte, index, lineNo int) error {
		if index < from || index%o.World != o.Rank {
			return nil
		}
		return fn(line, index, lineNo)
	})
	if oe := (outError{}); errors.As(err, &oe) {
		return oe // a write into --out, which names it
	}
	if err != nil {
		return fmt.Errorf("--data %s: %w", safeio.Clean(o.Data), err)
	}
	return nil
}

// writer accumulates samples into a shard.
type writer struct {
	o        Options
	m        *Manifest
	start    time.Time
	last     time.Time
	planned  int
	tokens   int64 // planned tokens still to do
	doneTok  int64 // tokens done in this process
	doneSmp  int
	written  int64
	feats    []float32
	ids      []float32
	mask     []float32
	offsets  []float32
	index    []float32
	skipped  []Skipped
	pending  int // samples in the buffer
	cut      int64
	trunc    int
	next     int // NextIndex once the buffer is written
	perToken int64
	longest  int      // the longest sample's tokens, once planned
	memNote  string   // what the run holds, for the line that starts it
	pack     []Sample // samples waiting for one packed forward
	packTok  int
}

// plan reads the data once: it finds bad lines before any compute (fatal
// under --on-error fail), counts the tokens to capture and checks the
// free space against them.
func (w *writer) plan() error {
	o := w.o
	w.perToken = int64(len(o.Layers)) * int64(o.Model.Config.HiddenSize) * dtypeBytes(o.DType)
	err := eachSample(o, w.m.NextIndex, func(line []byte, index, lineNo int) error {
		s, err := o.Prep.Prepare(line, index, lineNo)
		if err != nil {
			if o.OnError == "fail" {
				return fmt.Errorf("line %d: %v (--on-error skip leaves it out)", lineNo, err)
			}
			return nil
		}
		w.planned++
		w.tokens += int64(len(s.IDs))
		w.longest = max(w.longest, len(s.IDs))
		return nil
	})
	if err != nil {
		return err
	}
	w.m.SamplesPlanned = w.m.SamplesDone + w.planned
	need := w.tokens * (w.perToken + 16)
	if free, ok := o.FreeBytes(o.Out); ok && free+w.replaced() < need+need/100 {
		return fmt.Errorf("--out %s: the features of %d samples (%d tokens × %d layers × %d × %d bytes) need %s, and %s is free",
			safeio.Clean(o.Out), w.planned, w.tokens, len(o.Layers), o.Model.Config.HiddenSize, dtypeBytes(o.DType),
			safeio.FormatBytes(need), safeio.FormatBytes(free))
	}
	if w.planned == 0 {
		return nil
	}
	t := max(w.longest, min(o.PackTokens, int(w.tokens))) // a pack holds up to PackTokens, or one longer sample
	shard := min(o.Shard, w.tokens*w.perToken)            // the shard is never larger than the data
	mem, err := MemoryBytes(o.Model.Config, t, len(o.Layers), shard, w.tokens, o.DType)
	if err != nil {
		return err
	}
	w.memNote = ", holding about " + safeio.FormatBytes(mem) + " beyond the weights"
	if o.CheckMemory != nil {
		if err := o.CheckMemory(mem, fmt.Sprintf("forwards of up to %d tokens (--max-len caps them) capturing %d layers, with a %s shard buffered (--shard-mb)", t, len(o.Layers), safeio.FormatBytes(shard))); err != nil {
			return err
		}
	}
	// Allocated once, at its most: appends that grew it would copy it,
	// the old array live beside the new.
	w.feats = make([]float32, 0, bufferFloats(shard, o.DType, t, w.tokens, len(o.Layers), o.Model.Config.HiddenSize))
	return nil
}

// bufferFloats is the float32 capacity of the shard buffer: shard bytes
// in dtype and the forward of up to t tokens that crosses them, or all
// the data's tokens when fewer.
func bufferFloats(shard int64, dtype string, t int, tokens int64, layers, h int) int64 {
	lh := int64(layers) * int64(h)
	return min(shard/dtypeBytes(dtype)+int64(t)*lh, tokens*lh)
}

// MemoryBytes is what a run of tokens in all, with forwards of up to t
// tokens, holds beyond the weights: the recorded pass (model.EstimateFresh, no logits), one
// forward's captured taps [t, layers, H] in float32, and the shard buffer
// (bufferFloats), kept for the whole run, so it gets model.KeptHeadroom.
func MemoryBytes(cfg *model.Config, t, layers int, shard, tokens int64, dtype string) (int64, error) {
	est, err := model.EstimateFresh(cfg, 1, t, 0)
	if err != nil {
		return 0, err
	}
	// The estimate holds t·H under 2^57; taps and the buffer stay under 2^59.
	if th := int64(t) * int64(cfg.HiddenSize); layers < 1 || th > math.MaxInt64/64/int64(layers) || shard > math.MaxInt64/64 {
		return 0, fmt.Errorf("forwards of %d tokens capturing %d layers overflow any memory estimate", t, layers)
	}
	taps := int64(t) * int64(cfg.HiddenSize) * int64(layers) * 4
	buffered := bufferFloats(shard, dtype, t, tokens, layers, cfg.HiddenSize) * 4
	return est.Total() + taps + buffered + model.KeptHeadroom(buffered), nil
}

// replaced is the size of the output files in --out that the manifest
// does not list: a run stopped between a shard and its manifest leaves
// its last shard whole, and the resume writes it again over it, so its
// space counts as free.
func (w *writer) replaced() int64 {
	listed := map[string]bool{}
	for _, sh := range w.m.Shards {
		listed[filepath.FromSlash(sh.File)] = true
	}
	var n int64
	for _, pattern := range []string{"shard-*.safetensors", filepath.Join("hidden_states", "hs_*.safetensors")} {
		paths, _ := filepath.Glob(filepath.Join(w.o.Out, pattern))
		for _, p := range paths {
			rel, err := filepath.Rel(w.o.Out, p)
			if fi, serr := os.Lstat(p); err == nil && serr == nil && fi.Mode().IsRegular() && !listed[rel] {
				n += fi.Size()
			}
		}
	}
	return n
}

// sample prepares one sample and captures it, alone or in a pack.
func (w *writer) sample(line []byte, index, lineNo int) error {
	o := w.o
	s, err := o.Prep.Prepare(line, index, lineNo)
	if err != nil {
		if err := w.runPack(); err != nil { // the skip is recorded after the samples before it
			return err
		}
		w.next = index + 1
		if o.OnError == "fail" {
			return fmt.Errorf("line %d: %v", lineNo, err)
		}
		fmt.Fprintf(o.Progress, "features: skipping line %d: %v\n", lineNo, err)
		w.skipped = append(w.skipped, Skipped{Line: lineNo, Error: err.Error()})
		return nil
	}
	if o.PackTokens == 0 {
		return w.capture([]Sample{s})
	}
	if w.packTok+len(s.IDs) > o.PackTokens {
		if err := w.runPack(); err != nil {
			return err
		}
	}
	w.pack = append(w.pack, s)
	w.packTok += len(s.IDs)
	return nil
}

// runPack captures the samples waiting in the pack.
func (w *writer) runPack() error {
	if len(w.pack) == 0 {
		return nil
	}
	err := w.capture(w.pack)
	w.pack, w.packTok = w.pack[:0], 0
	return err
}

// capture runs samples in one forward and buffers each in turn, as one
// run at a time would: the shards and manifest do not depend on packing.
func (w *writer) capture(ss []Sample) error {
	o := w.o
	l, h := len(o.Layers), o.Model.Config.HiddenSize
	ids := make([][]int, len(ss))
	for i, s := range ss {
		ids[i] = s.IDs
	}
	feats, err := CapturePacked(o.Runner, ids, o.Layers, h)
	if err != nil {
		if len(ss) > 1 {
			return fmt.Errorf("lines %d to %d, packed: %w", ss[0].Line, ss[len(ss)-1].Line, err)
		}
		return fmt.Errorf("line %d: %w", ss[0].Line, err)
	}
	for _, s := range ss {
		t := len(s.IDs)
		w.next = s.Index + 1
		if len(w.offsets) == 0 {
			w.offsets = append(w.offsets, 0)
		}
		w.feats = append(w.feats, feats[:t*l*h]...)
		feats = feats[t*l*h:]
		for _, id := range s.IDs {
			w.ids = append(w.ids, float32(id))
		}
		w.mask = append(w.mask, s.Mask...)
		w.offsets = append(w.offsets, float32(len(w.ids)))
		w.index = append(w.index, float32(s.Index))
		w.pending++
		if s.Cut > 0 {
			w.trunc++
			w.cut += int64(s.Cut)
		}
		w.doneTok += int64(t)
		w.doneSmp++
		if o.Format == FormatSpeculators || int64(len(w.feats))*dtypeBytes(o.DType) >= o.Shard {
			if err := w.flush(false); err != nil {
				return err
			}
		}
		w.progress(false)
	}
	return nil
}

// outError is a failure to write into --out, which it names.
type outError struct{ error }

func (e outError) Unwrap() error { return e.error }

// flush writes the buffered samples (a shard, or a speculators file) and
// then the manifest; the manifest is written every 64 speculators files
// and at the end.
func (w *writer) flush(final bool) error {
	if err := w.flushShard(final); err != nil {
		return outError{fmt.Errorf("--out %s: %w", safeio.Clean(w.o.Out), err)}
	}
	return nil
}

// flushShard is flush without the --out its errors are named by.
func (w *writer) flushShard(final bool) error {
	o, m := w.o, w.m
	if w.pending > 0 {
		sh, err := w.writeShard()
		if err != nil {
			return err
		}
		m.Shards = append(m.Shards, sh)
		m.SamplesDone += w.pending
		m.TokensDone += int64(sh.Tokens)
		w.written += sh.Bytes
	}
	m.Skipped = append(m.Skipped, w.skipped...)
	m.Truncated += w.trunc
	m.TokensCut += w.cut
	if w.next > m.NextIndex {
		m.NextIndex = w.next
	}
	w.feats, w.ids, w.mask, w.offsets, w.index, w.skipped = w.feats[:0], w.ids[:0], w.mask[:0], w.offsets[:0], w.index[:0], nil
	w.pending, w.trunc, w.cut = 0, 0, 0
	if o.Format == FormatSpeculators && !final && len(m.Shards)%64 != 0 {
		return nil
	}
	m.Complete = final
	if err := m.write(o.Out); err != nil {
		return err
	}
	if o.AfterCommit != nil {
		return o.AfterCommit(m)
	}
	return nil
}

// writeShard writes the buffer as one safetensors file through a temp
// file and a rename.
func (w *writer) writeShard() (Shard, error) {
	o := w.o
	t, l, h := len(w.ids), len(o.Layers), o.Model.Config.HiddenSize
	var name string
	var ts []weights.NamedTensor
	meta := map[string]string{"qwenref.layers": tapNames(o.Layers), "qwenref.convention": Convention}
	if o.Format == FormatSpeculators {
		name = filepath.Join("hidden_states", fmt.Sprintf("hs_%d.safetensors", int(w.index[0])))
		ts = []weights.NamedTensor{
			{Name: "hidden_states", DType: o.DType, Shape: []int{t, l, h}, Data: w.feats},
			{Name: "token_ids", DType: "I64", Shape: []int{t}, Data: w.ids},
			{Name: "loss_mask", DType: "I64", Shape: []int{t}, Data: w.mask},
		}
		if err := os.MkdirAll(filepath.Join(o.Out, "hidden_states"), 0o777); err != nil {
			return Shard{}, err
		}
	} else {
		name = fmt.Sprintf("shard-%05d.safetensors", len(w.m.Shards))
		ts = []weights.NamedTensor{
			{Name: "features", DType: o.DType, Shape: []int{t, l, h}, Data: w.feats},
			{Name: "input_ids", DType: "I64", Shape: []int{t}, Data: w.ids},
			{Name: "loss_mask", DType: "I64", Shape: []int{t}, Data: w.mask},
			{Name: "offsets", DType: "I64", Shape: []int{len(w.offsets)}, Data: w.offsets},
			{Name: "sample_index", DType: "I64", Shape: []int{len(w.index)}, Data: w.index},
		}
	}
	path := filepath.Join(o.Out, name)
	if err := weights.WriteFile(path, ts, meta); err != nil {
		return Shard{}, err
	}
	sum, err := FileSHA256(path)
	if err != nil {
		return Shard{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return Shard{}, err
	}
	return Shard{File: filepath.ToSlash(name), SHA256: sum, Samples: w.pending, Tokens: t, Bytes: st.Size()}, nil
}

// progress prints samples/s, tok/s, bytes written and the ETA on
// o.Progress, at most every 2 s unless final.
func (w *writer) progress(final bool) {
	now := time.Now()
	if !final && now.Sub(w.last) < 2*time.Second {
		return
	}
	w.last = now
	el := now.Sub(w.start).Seconds()
	if el <= 0 {
		el = 1e-9
	}
	tps := float64(w.doneTok) / el
	eta := "?"
	if tps > 0 {
		eta = (time.Duration(float64(w.tokens-w.doneTok)/tps) * time.Second).Round(time.Second).String()
	}
	fmt.Fprintf(w.o.Progress, "features: %d/%d samples, %.2f samples/s, %.0f tok/s, %s written, ETA %s\n",
		w.m.SamplesDone+w.pending, w.m.SamplesPlanned, float64(w.doneSmp)/el, tps, safeio.FormatBytes(w.written), eta)
}

func tapNames(taps []Tap) string {
	names := make([]string, len(taps))
	for i, t := range taps {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

// Capture runs ids through r from a fresh state and copies the taps'
// stages into out, laid out [T, len(taps), h].
func Capture(r model.Runner, ids []int, taps []Tap, h int, out []float32) error {
	if len(out) != len(ids)*len(taps)*h {
		return fmt.Errorf("features: capture buffer holds %d values, want %d", len(out), len(ids)*len(taps)*h)
	}
	got, err := CapturePacked(r, [][]int{ids}, taps, h)
	copy(out, got)
	return err
}

// CapturePacked runs samples through r in one forward from a fresh state,
// packed one after another when there are several (each from position 0,
// seeing only itself), and returns the taps' stages of every sample in
// turn, each laid out [T, len(taps), h].
func CapturePacked(r model.Runner, samples [][]int, taps []Tap, h int) ([]float32, error) {
	if err := r.Reset(); err != nil {
		return nil, err
	}
	var ids, segs []int
	for _, s := range samples {
		segs = append(segs, len(ids))
		ids = append(ids, s...)
	}
	if len(samples) < 2 {
		segs = nil
	}
	t, l := len(ids), len(taps)
	out := make([]float32, t*l*h)
	slot := make(map[string]int, l)
	only := make([]string, 0, l)
	for k, tp := range taps {
		slot[tp.Stage] = k
		only = append(only, tp.Stage)
	}
	seen := make([]bool, l)
	var bad error
	rec := tensor.Recorder(func(stage string, x *tensor.Tensor) {
		k, ok := slot[stage]
		if !ok {
			return
		}
		if len(x.Data) != t*h {
			bad = fmt.Errorf("stage %s has %d values, want %d × %d", stage, len(x.Data), t, h)
			return
		}
		for i := range t {
			copy(out[(i*l+k)*h:(i*l+k+1)*h], x.Data[i*h:(i+1)*h])
		}
		seen[k] = true
	})
	if _, err := r.Forward([][]int{ids}, model.RunOptions{Logits: model.NoLogits, Record: rec, RecordOnly: only, Segments: segs}); err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	for k, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("backend %s did not record stage %s", r.Backend(), taps[k].Stage)
		}
	}
	return out, nil
}
