package model

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/qwenref/qwenref/tensor"
)

// Logits says which positions' logits a Runner call returns. A prefill of
// T = 8192 tokens with a 248,320-token vocabulary would be 8 GB of logits:
// commands ask only for what they read.
type Logits int

const (
	// AllLogits returns [B, T, V]: every position (forward, perplexity).
	AllLogits Logits = iota
	// LastLogits returns [B, 1, V]: the last position (generation).
	LastLogits
	// NoLogits returns nil: a prefill whose logits nobody reads.
	NoLogits
)

// RunOptions tune one Runner call.
type RunOptions struct {
	Logits Logits
	// Record, if set, receives every intermediate under the stage names of
	// Options.Record ("embeddings", "layers.N.<stage>", "final_norm",
	// "logits"). Only single-row runners record; tensors are views.
	Record tensor.Recorder
	// RecordOnly, if not empty, names the stages Record must receive; a
	// runner may then skip the others (the device records these alone and
	// keeps its fused kernels elsewhere). Empty: every stage.
	RecordOnly []string
	// Out, if set, receives the logits and is the tensor returned: its Data
	// is reused when it has room for them (a decode loop passing the same
	// tensor every step allocates nothing per step), and grown otherwise.
	// The previous call's logits in it are overwritten.
	Out *tensor.Tensor
	// Segments, if more than one, packs samples into each row: the start
	// row of each (cu_seqlens without its last value; the first is 0),
	// the same for every row. Each sample starts from empty caches at
	// position 0 and attends only within itself, so its rows equal the
	// sample run alone; the runner must be at position 0, and after the
	// call each row holds its last sample's caches (Options.Segments). A
	// runner that cannot pack refuses them.
	Segments []int
}

// OutTensor returns opt.Out shaped [shape…] with its Data reused when it
// has room, or a new tensor when opt.Out is nil; every runner sizes its
// result through it. The values are not cleared.
func (opt RunOptions) OutTensor(shape ...int) *tensor.Tensor {
	n := tensor.NumElements(shape)
	t := opt.Out
	if t == nil {
		return tensor.New(shape...)
	}
	if cap(t.Data) < n {
		t.Data = make([]float32, n)
	}
	t.Data = t.Data[:n]
	t.Shape = append(t.Shape[:0], shape...)
	return t
}

// Runner is what a command runs: a model on one backend for B ≥ 1
// sequences that advance together. The CPU backends implement it with one
// Session per row; a device-resident backend (Device.NewRunner) with its
// own caches on the device.
type Runner interface {
	// Forward feeds ids[b] to row b (every row the same length) and returns
	// the logits opt.Logits asks for.
	Forward(ids [][]int, opt RunOptions) (*tensor.Tensor, error)
	// Layer runs decoder block i alone on x [T, H] for row 0, continuing
	// that block's state, and returns the block's output (teacher forcing).
	Layer(i int, x []float32, t int, rec tensor.Recorder) ([]float32, error)
	// Pos is the number of tokens each row has consumed.
	Pos() int
	// Rows is B.
	Rows() int
	// Reset empties every cache for new sequences.
	Reset() error
	// Close releases the runner's resources (not the backend's).
	Close() error
	// Backend is the spec of the backend it runs on.
	Backend() string
}

// NewRunner returns a Runner for rows sequences of m on be: the backend's
// own (device-resident) runner when it has one, else CPU sessions.
func NewRunner(m *Model, be *Backend, rows int) (Runner, error) {
	if rows < 1 {
		return nil, fmt.Errorf("a runner needs at least one row, not %d", rows)
	}
	if be.Resident() {
		return be.Device.NewRunner(m, rows)
	}
	r := &sessionRunner{m: m, be: be, rows: make([]*Session, rows)}
	for i := range r.rows {
		r.rows[i] = m.NewSession()
	}
	return r, nil
}

// RandomRunnerFunc builds a runner over a model of cfg's shape whose
// weights the backend generates itself from seed.
type RandomRunnerFunc func(cfg *Config, seed uint64, rows int) (Runner, error)

// HasRandomRunner reports whether be's device builds random-weight
// runners itself (Device.NewRandomRunner).
func HasRandomRunner(be *Backend) bool {
	return be.Device != nil && be.Device.NewRandomRunner != nil
}

// NewRandomRunner returns be's runner for rows sequences of a model of
// cfg's shape with weights the backend generates from seed, or an error
// when the backend offers none (HasRandomRunner).
func NewRandomRunner(be *Backend, cfg *Config, seed uint64, rows int) (Runner, error) {
	if !HasRandomRunner(be) {
		return nil, fmt.Errorf("backend %s cannot generate random weights itself: build a host model (NewRandom) and use NewRunner", be.Name)
	}
	if rows < 1 {
		return nil, fmt.Errorf("a runner needs at least one row, not %d", rows)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return be.Device.NewRandomRunner(cfg, seed, rows)
}

// sessionRunner runs each row in its own Session on a CPU backend.
type sessionRunner struct {
	mu   sync.Mutex // serialises Forward, Layer and Reset across rows
	m    *Model
	be   *Backend
	rows []*Session
}

func (r *sessionRunner) Rows() int       { return len(r.rows) }
func (r *sessionRunner) Pos() int        { return r.rows[0].Pos() }
func (r *sessionRunner) Backend() string { return r.be.Name }
func (r *sessionRunner) Close() error    { return nil }

func (r *sessionRunner) Reset() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.rows {
		s.Reset()
	}
	return nil
}

func (r *sessionRunner) Forward(ids [][]int, opt RunOptions) (*tensor.Tensor, error) {
	if !r.mu.TryLock() {
		return nil, errBusy
	}
	defer r.mu.Unlock()
	t, err := CheckBatch(r.m, ids, len(r.rows))
	if err != nil {
		return nil, err
	}
	if opt.Record != nil && len(r.rows) > 1 {
		return nil, errors.New("stage recording needs a single-row runner")
	}
	if len(opt.Segments) > 1 { // refused before any row advances
		if err := checkPacking(opt.Segments, t); err != nil {
			return nil, err
		}
		if opt.Logits == LastLogits {
			return nil, errors.New("packed segments give every position's logits or none, not the last only")
		}
		if p := r.rows[0].Pos(); p != 0 {
			return nil, fmt.Errorf("packed segments start at position 0, and the runner is at %d: reset it first", p)
		}
	}
	v := r.m.Config.VocabSize
	var out *tensor.Tensor
	switch opt.Logits {
	case AllLogits:
		out = opt.OutTensor(len(ids), t, v)
	case LastLogits:
		out = opt.OutTensor(len(ids), 1, v)
	}
	for b, row := range ids {
		o := Options{LastOnly: opt.Logits == LastLogits, NoLogits: opt.Logits == NoLogits, Record: opt.Record, Segments: opt.Segments}
		if out != nil {
			o.out = out.Data[b*len(out.Data)/len(ids):] // the row's logits land in place
		}
		lg, err := r.rows[b].forwardIDs(row, r.be, o, true)
		if err != nil {
			if len(ids) > 1 {
				err = fmt.Errorf("batch row %d: %w", b, err)
			}
			return nil, err
		}
		if out != nil && &lg.Data[0] != &out.Data[b*len(lg.Data)] {
			copy(out.Data[b*len(lg.Data):], lg.Data)
		}
	}
	return out, nil
}

func (r *sessionRunner) Layer(i int, x []float32, t int, rec tensor.Recorder) ([]float32, error) {
	if !r.mu.TryLock() {
		return nil, errBusy
	}
	defer r.mu.Unlock()
	return r.rows[0].Layer(i, x, t, r.be, rec)
}

// CheckBatch validates a batch for a runner of `rows` rows: one id list per
// row, every row the same non-zero length, every id in the vocabulary. It
// returns T.
func CheckBatch(m *Model, ids [][]int, rows int) (int, error) {
	if len(ids) != rows {
		return 0, fmt.Errorf("%d rows of ids for a runner of %d rows", len(ids), rows)
	}
	if len(ids) == 0 || len(ids[0]) == 0 {
		return 0, ErrEmpty
	}
	t := len(ids[0])
	for b, row := range ids {
		if len(row) != t {
			return 0, fmt.Errorf("batch row %d has %d tokens but row 0 has %d: rows must have equal length", b, len(row), t)
		}
		if err := m.CheckIDs(row); err != nil {
			if len(ids) > 1 {
				err = fmt.Errorf("batch row %d: %w", b, err)
			}
			return 0, err
		}
	}
	return t, nil
}

// ForwardHidden runs each row of batch (equal lengths T) from position 0
// and returns the logits [B, T, V] and the final-norm hidden states
// [B, T, H], flattened. The rows go one at a time through one single-row
// runner, reset between them: the recorder that captures the hidden
// states takes one row at a time. On a device-resident backend recording
// copies every stage off the device, so the pass is slower there than an
// untraced one.
func ForwardHidden(m *Model, be *Backend, batch [][]int) (logits, hidden []float32, err error) {
	if len(batch) == 0 || len(batch[0]) == 0 {
		return nil, nil, ErrEmpty
	}
	cfg, t := m.Config, len(batch[0])
	logits = make([]float32, len(batch)*t*cfg.VocabSize)
	hidden = make([]float32, 0, len(batch)*t*cfg.HiddenSize)
	r, err := NewRunner(m, be, 1)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	for b, ids := range batch {
		var h []float32
		rec := func(stage string, x *tensor.Tensor) {
			if stage == stageFinalNorm {
				h = append([]float32(nil), x.Data...)
			}
		}
		if b > 0 {
			if err := r.Reset(); err != nil {
				return nil, nil, err
			}
		}
		// Each row's logits are computed into their place in the result.
		row := &tensor.Tensor{Data: logits[b*t*cfg.VocabSize : (b+1)*t*cfg.VocabSize]}
		lg, err := r.Forward([][]int{ids}, RunOptions{Logits: AllLogits, Record: rec, Out: row})
		if err == nil && len(h) != len(ids)*cfg.HiddenSize {
			err = fmt.Errorf("backend %s recorded no final-norm hidden states (%d values, want %d)", be.Name, len(h), len(ids)*cfg.HiddenSize)
		}
		if err != nil {
			if len(batch) > 1 {
				err = fmt.Errorf("ids row %d: %w", b, err)
			}
			return nil, nil, err
		}
		if &lg.Data[0] != &row.Data[0] {
			copy(row.Data, lg.Data) // a device runner's own tensor
		}
		hidden = append(hidden, h...)
	}
	return logits, hidden, nil
}

// Agreement is one backend's prompt logits measured against a reference
// backend's on the same ids (CompareBackends).
type Agreement struct {
	Backend string
	// Why says why the backend was not compared ("" when it was).
	Why string
	// RelL2 and MaxAbs compare every logit; Argmax counts the positions of
	// Positions whose most likely token agrees.
	RelL2, MaxAbs     float64
	Argmax, Positions int
	// BF16 marks a backend that computes in bf16: its distance is bf16's
	// rounding (about 1e-2 relative L2), not a fault.
	BF16 bool
}

// String is the comparison as one phrase.
func (a Agreement) String() string {
	if a.Why != "" {
		return a.Backend + " " + a.Why
	}
	name := a.Backend
	if a.BF16 {
		name += " (bf16 compute)"
	}
	return fmt.Sprintf("%s: rel L2 %.1e, max-abs %.1e, argmax %d/%d", name, a.RelL2, a.MaxAbs, a.Argmax, a.Positions)
}

// CompareBackends runs ids through m on ref and on every other registered
// backend and measures each one's prompt logits against ref's. Unless
// all, naive is skipped past 20 GFLOP of work (about 1 GFLOP/s is its
// floor on this class of CPU, so that is 20 s).
func CompareBackends(m *Model, ref *Backend, ids []int, all bool) ([]Agreement, error) {
	want, err := m.Forward([][]int{ids}, ref)
	if err != nil {
		return nil, err
	}
	var out []Agreement
	gflop := 2 * float64(m.Config.TextParams()) * float64(len(ids)) / 1e9
	for _, name := range BackendNames() {
		if name == ref.Name {
			continue
		}
		if name == "naive" && !all && gflop > 20 {
			out = append(out, Agreement{Backend: name, Why: fmt.Sprintf("skipped (~%.0f GFLOP; --compare all forces it)", gflop)})
			continue
		}
		be, err := ParseBackend(name)
		if err != nil {
			out = append(out, Agreement{Backend: name, Why: fmt.Sprintf("unavailable: %v", err)})
			continue
		}
		got, err := m.Forward([][]int{ids}, be)
		be.Close()
		if err != nil {
			out = append(out, Agreement{Backend: name, Why: fmt.Sprintf("failed: %v", err)})
			continue
		}
		a := Agreement{Backend: name, BF16: be.Precision == PrecisionBF16, RelL2: tensor.RelL2(got.Data, want.Data), MaxAbs: tensor.MaxAbsDiff(got.Data, want.Data), Positions: len(ids)}
		v := m.Config.VocabSize
		for p := range ids {
			if tensor.Argmax(got.Data[p*v:(p+1)*v]) == tensor.Argmax(want.Data[p*v:(p+1)*v]) {
				a.Argmax++
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// SplitUnavailable separates the backends CompareBackends could not open
// from the rest, with one line per reason naming every backend it stopped
// ("cuda, cuda-fp32, cuda-ops unavailable: …"), so a missing GPU is said
// once rather than per backend.
func SplitUnavailable(as []Agreement) (rest []Agreement, notes []string) {
	var reasons []string
	names := map[string][]string{}
	for _, a := range as {
		why, ok := strings.CutPrefix(a.Why, "unavailable: ")
		if !ok {
			rest = append(rest, a)
			continue
		}
		if names[why] == nil {
			reasons = append(reasons, why)
		}
		names[why] = append(names[why], a.Backend)
	}
	for _, why := range reasons {
		notes = append(notes, strings.Join(names[why], ", ")+" unavailable: "+why)
	}
	return rest, notes
}

// BackendComparer compares the prompt logits of a run's prompts across
// backends (CompareBackends) and says why backends could not open once per
// run. The zero value is ready.
type BackendComparer struct{ noted map[string]bool }

// LogitRows is how many rows of logits a run of an n-token prompt keeps
// with the comparison in mode ("none", "auto" or "all"), for its memory
// check: the reference's and one other backend's at every position when it
// compares, else the one row generation keeps.
func (bc *BackendComparer) LogitRows(mode string, n int) int {
	if mode == "none" {
		return 1
	}
	return 2 * n
}

// Compare returns the comparison as a line, "[prompt logits vs chunked:
// naive: rel L2 …]", and the reasons backends could not open not given
// before ("cuda, cuda-fp32 unavailable: …").
func (bc *BackendComparer) Compare(m *Model, ref *Backend, ids []int, all bool) (line string, notes []string) {
	as, err := CompareBackends(m, ref, ids, all)
	if err != nil {
		return fmt.Sprintf("[compare: %v]", err), nil
	}
	as, why := SplitUnavailable(as)
	if bc.noted == nil {
		bc.noted = map[string]bool{}
	}
	for _, n := range why {
		if !bc.noted[n] {
			bc.noted[n] = true
			notes = append(notes, n)
		}
	}
	parts := []string{"no other backend to compare"}
	for i, a := range as {
		if i == 0 {
			parts = parts[:0]
		}
		parts = append(parts, a.String())
	}
	return fmt.Sprintf("[prompt logits vs %s: %s]", ref.Name, strings.Join(parts, "; ")), notes
}
