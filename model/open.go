package model

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/qwenref/qwenref/hub"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/weights"
)

// OpenOptions say what Open opens and checks. Every command that runs a model
// fills one, so the steps, their order and their messages are written once.
type OpenOptions struct {
	// Model is a checkpoint directory or, when no such path exists, a
	// Hugging Face repo id org/name[@revision] found in the local cache
	// (ResolveModel; no network). "" opens Default.
	Model string
	// Default makes the model "" stands for (the CLI's bundled demo); nil
	// makes "" an error.
	Default func() (*Model, error)
	// Backend is the backend spec to open (ParseBackend); "" opens none.
	Backend string
	// Plugins run first, in order, so that Backend can name the kernels
	// they register (each --plugin of the CLI loads one library).
	Plugins []func() error
	// IDs are the token-id rows the command will run, checked against the
	// vocabulary (CheckRows) right after loading; IDsName names them in
	// the message, e.g. "--ids".
	IDs     [][]int
	IDsName string
	// MaxMemory bounds what a run may allocate beyond the mapped weights
	// (bytes; 0: no limit), and MemorySource names that limit in messages.
	MaxMemory    int64
	MemorySource string
	// Run, if set, is checked (Opened.CheckRun) before the weights are
	// paged in.
	Run *RunSize
	// BoundHeap holds the process to the estimate of the run it was last
	// checked for (Run, and each later CheckRun or CheckGeneration): the
	// Go collector's memory limit becomes what the process holds then plus
	// the estimate (BoundHeap), so the garbage a run leaves between
	// collections cannot carry its peak past what the guard checked.
	BoundHeap bool
	// Check, if set, runs on the opened model before its weights are paged
	// in: a command's own checks that need the model (that an output
	// replaces none of its files, that a layer index is in range).
	Check func(*Opened) error
	// Prefault pages a checkpoint of 256 MiB or more in when it fits in
	// 60% of the available RAM, and otherwise streams it, each layer paged
	// in for its turn and dropped after it (Model.SetStreaming).
	Prefault bool
	// CheckWeights scans every weight matrix for NaN/Inf first
	// (Model.CheckFinite), naming the first bad tensor.
	CheckWeights bool
	// Log receives what a user may want to read: where a hub reference
	// was found and the weight check's progress (nil: nothing).
	Log io.Writer
	// Notices receives what a user must read: Load's warnings, the
	// prefault line (a bar on a terminal) and the backend's refusals of
	// the model's shape (nil: Log).
	Notices io.Writer
}

// RunSize is the shape of a run: rows sequences of tokens tokens each,
// with logits for logitRows positions in all; What names the argument
// that sets the length in messages.
type RunSize struct {
	Rows, Tokens, LogitRows int
	What                    string
	// Prefill, when set, is how many tokens one forward pass computes at
	// once (generation: the prompt; the rest are decoded one at a time), so
	// the activations are sized by it while the caches grow to Tokens.
	Prefill int
	// Recorded marks a pass whose stages are recorded (forward's hidden
	// states): its layers allocate their buffers afresh (EstimateRecorded).
	Recorded bool
}

// Opened is what Open returns: the model, the backend (nil when none was
// asked for) and the checkpoint directory ("" for OpenOptions.Default).
type Opened struct {
	Model   *Model
	Backend *Backend
	Dir     string

	maxMemory    int64
	memorySource string
	estimate     Memory // the estimate Run was checked at
	boundHeap    bool   // OpenOptions.BoundHeap
}

// Open runs the sequence every command runs before its work: plug-ins, the
// backend (a bad spec fails before anything loads), the model directory
// (a path, or a repo id in the Hugging Face cache), Load and its warnings,
// the token ids, the run's length and memory, the command's own Check,
// the backend's refusals of the model's shape, prefault, and the weight
// scan. On an error everything opened so far is closed.
func Open(o OpenOptions) (*Opened, error) {
	op := &Opened{maxMemory: o.MaxMemory, memorySource: o.MemorySource, boundHeap: o.BoundHeap}
	if err := op.open(o); err != nil {
		op.Close()
		return nil, err
	}
	return op, nil
}

// open is Open's sequence, filling op as it goes.
func (op *Opened) open(o OpenOptions) (err error) {
	log := writerOr(o.Log, io.Discard)
	notices := writerOr(o.Notices, log)
	for _, load := range o.Plugins {
		if err := load(); err != nil {
			return err
		}
	}
	if o.Backend != "" {
		if op.Backend, err = ParseBackend(o.Backend); err != nil {
			return err
		}
	}
	switch {
	case o.Model != "":
		if op.Dir, err = ResolveModel(o.Model, log); err != nil {
			return err
		}
		if op.Model, err = Load(op.Dir); err != nil {
			return err
		}
	case o.Default != nil:
		if op.Model, err = o.Default(); err != nil {
			return err
		}
	default:
		return errors.New("no model given")
	}
	m := op.Model
	for _, w := range m.Warnings {
		fmt.Fprintf(notices, "warning: %s\n", w)
	}
	if err := m.CheckRows(o.IDs, o.IDsName); err != nil {
		return err
	}
	if r := o.Run; r != nil && r.Recorded {
		if err := m.Config.CheckLength(r.Tokens, r.What); err != nil {
			return err
		}
		if op.estimate, err = EstimateFresh(m.Config, r.Rows, r.Tokens, r.LogitRows); err != nil {
			return err
		}
		if err := overLimit(op.estimate, r.Rows, r.Tokens, op.maxMemory, op.memorySource); err != nil {
			return err
		}
	} else if r != nil {
		if err := m.Config.CheckLength(r.Tokens, r.What); err != nil {
			return err
		}
		if op.estimate, err = checkGeneration(m.Config, r.Rows, r.Prefill, r.Tokens, r.LogitRows, op.maxMemory, op.memorySource); err != nil {
			return err
		}
	}
	if o.Check != nil {
		if err := o.Check(op); err != nil {
			return err
		}
	}
	if op.Backend != nil {
		if err := op.Backend.Supports(m.Config); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(notices, "notice: backend %s: %s\n", op.Backend.Name, line)
			}
		}
	}
	if o.Prefault {
		if err := prefault(m, notices); err != nil {
			return err
		}
	}
	if o.CheckWeights {
		if err := checkWeights(m, log); err != nil {
			return err
		}
	}
	if o.BoundHeap && o.Run != nil {
		BoundHeap(op.estimate.Total())
	}
	return nil
}

// Close closes the backend and the model.
func (op *Opened) Close() error {
	if op == nil {
		return nil
	}
	var errs []error
	if op.Backend != nil {
		errs = append(errs, op.Backend.Close())
	}
	if op.Model != nil {
		errs = append(errs, op.Model.Close())
	}
	return errors.Join(errs...)
}

// CheckRun bounds a run before any of its memory is allocated: every
// sequence within max_position_embeddings, and EstimateMemory's estimate
// under OpenOptions.MaxMemory. what names the ids' argument for the message.
func (op *Opened) CheckRun(rows, tokens, logitRows int, what string) error {
	return op.CheckGeneration(rows, 0, tokens, logitRows, what)
}

// CheckGeneration is CheckRun for a run that prefills prefill tokens and
// decodes the rest one at a time up to tokens (prefill 0: all at once).
func (op *Opened) CheckGeneration(rows, prefill, tokens, logitRows int, what string) error {
	cfg := op.Model.Config
	if err := cfg.CheckLength(tokens, what); err != nil {
		return err
	}
	est, err := checkGeneration(cfg, rows, prefill, tokens, logitRows, op.maxMemory, op.memorySource)
	if err == nil && op.boundHeap {
		BoundHeap(est.Total())
	}
	return err
}

// CheckBytes checks need bytes that a command sized itself (a features
// run: model plus buffers) against OpenOptions.MaxMemory, what describing
// the run in the message, and holds the process to it as CheckGeneration
// does (OpenOptions.BoundHeap).
func (op *Opened) CheckBytes(need int64, what string) error {
	if op.maxMemory > 0 && need > op.maxMemory {
		return fmt.Errorf("%s need about %s beyond the weights, over the limit of %.3g GiB (%s): make the run smaller, or raise --max-memory",
			what, safeio.FormatBytes(need), float64(op.maxMemory)/(1<<30), op.memorySource)
	}
	if op.boundHeap {
		BoundHeap(need)
	}
	return nil
}

// Inputs lists the files of the checkpoint that a command reads, so that
// no output may replace one of them.
func (op *Opened) Inputs() []string {
	var in []string
	if op.Dir != "" {
		in = []string{filepath.Join(op.Dir, "config.json"), filepath.Join(op.Dir, "generation_config.json"),
			filepath.Join(op.Dir, weights.IndexFile), filepath.Join(op.Dir, "tokenizer.json")}
	}
	if op.Model != nil {
		in = append(in, op.Model.Files()...)
	}
	return in
}

// ResolveModel turns a --model argument into a checkpoint directory (or a
// config file) for every command that takes one. A path that exists wins;
// otherwise org/name[@revision] is looked up in the Hugging Face cache
// (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub) without the
// network, and log hears where it was found. "" stays "".
func ResolveModel(arg string, log io.Writer) (string, error) {
	if arg == "" {
		return "", nil
	}
	if _, err := os.Stat(arg); err == nil {
		return arg, nil
	}
	repo, rev, err := hub.ParseRef(arg)
	if err != nil {
		return "", fmt.Errorf("--model %s: no such directory, nor a Hugging Face repo id (org/name[@revision])",
			safeio.Clean(arg))
	}
	dir, err := hub.Resolve(hub.CacheDir(), repo, rev)
	if err != nil {
		return "", fmt.Errorf("--model %s: no such directory, and %w", safeio.Clean(arg), err)
	}
	fmt.Fprintf(writerOr(log, io.Discard), "model: %s@%s from the Hugging Face cache, %s\n", repo, rev, dir)
	return dir, nil
}

// AvailableMemory is MemAvailable of /proc/meminfo in bytes (0: unknown).
func AvailableMemory() int64 { return meminfoKB("MemAvailable") * 1024 }

// TotalMemory is MemTotal of /proc/meminfo in bytes (0: unknown).
func TotalMemory() int64 { return meminfoKB("MemTotal") * 1024 }

func meminfoKB(key string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// prefault is OpenOptions.Prefault, with a progress bar when w is a terminal
// and one line otherwise.
func prefault(m *Model, w io.Writer) error {
	size := m.WeightBytes()
	const big = 256 << 20
	if size < big {
		return nil
	}
	if avail := AvailableMemory(); avail > 0 && size > avail*6/10 {
		fmt.Fprintf(w, "weights: %.1f GB memory-mapped, more than 60%% of available RAM (%.1f GB): streaming, each layer pages in for its turn and is dropped after it\n",
			float64(size)/1e9, float64(avail)/1e9)
		m.SetStreaming(true)
		return nil
	}
	start := time.Now()
	if !isTerminal(w) {
		// No \r into pipes and files: one line when done.
		if err := m.Prefault(nil); err != nil {
			return err
		}
		fmt.Fprintf(w, "loaded weights (%.2f GB) in %v\n", float64(size)/1e9, time.Since(start).Round(time.Millisecond))
		return nil
	}
	last := time.Time{}
	err := m.Prefault(func(done, total int64) {
		if time.Since(last) < 100*time.Millisecond && done < total {
			return
		}
		last = time.Now()
		const width = 30
		n := int(float64(width) * float64(done) / float64(total))
		fmt.Fprintf(w, "\rloading weights [%s%s] %5.1f%% of %.2f GB", strings.Repeat("█", n), strings.Repeat("·", width-n),
			100*float64(done)/float64(total), float64(total)/1e9)
	})
	fmt.Fprintf(w, " in %v\n", time.Since(start).Round(time.Millisecond))
	return err
}

// checkWeights is OpenOptions.CheckWeights, with a progress line on w.
func checkWeights(m *Model, w io.Writer) error {
	start, last := time.Now(), time.Time{}
	err := m.CheckFinite(func(done, total int64) {
		if time.Since(last) < 200*time.Millisecond && done < total {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "\rchecking weights: %5.1f%% of %.2f GB", 100*float64(done)/float64(total), float64(total)/1e9)
	})
	fmt.Fprintln(w)
	if err != nil {
		return fmt.Errorf("--check-weights: %w", err)
	}
	fmt.Fprintf(w, "checking weights: every matrix is finite (%v)\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// isTerminal reports whether w is a character device, where progress can
// redraw one line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func writerOr(w, def io.Writer) io.Writer {
	if w == nil {
		return def
	}
	return w
}
