package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/term"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/plugin"
	"github.com/qwenref/qwenref/tokenizer"
)

// The flags of the commands that open a model, defined once each, and
// the one way those commands open it (model.Open).

// addModelFlag adds --model; what says what the command does with it.
func addModelFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("model", "", "checkpoint directory, or org/name[@revision] in the Hugging Face cache"+what)
}

// demoModel is addModelFlag's what for a command whose default is the demo.
const demoModel = " (default: the bundled random-weight demo)"

// defaultBackend is every command's default: chunked, the fp32 CPU
// reference path (never a bf16 variant), or naive where chunked is absent.
func defaultBackend() string {
	if slices.Contains(model.BackendNames(), "chunked") {
		return "chunked"
	}
	return "naive"
}

// addBackendFlag adds --backend.
func addBackendFlag(fs *flag.FlagSet) *string {
	return fs.String("backend", defaultBackend(), fmt.Sprintf("kernels to run on: %v", model.BackendNames()))
}

// idFlags are --ids and --ids-json.
type idFlags struct{ list, file *string }

func addIDFlags(fs *flag.FlagSet) idFlags {
	return idFlags{
		list: fs.String("ids", "", "token ids of one row, comma-separated or a JSON array (- reads stdin)"),
		file: fs.String("ids-json", "", "JSON file with token ids, [[id, ...], ...] or [id, ...] (- reads stdin)"),
	}
}

// read reads the rows (readIDs); name is the flag they came from.
func (f idFlags) read() ([][]int, error) { return readIDs("--ids", *f.list, *f.file) }
func (f idFlags) name() string {
	if *f.file != "" {
		return "--ids-json"
	}
	return "--ids"
}

// memoryFlag is --max-memory GiB, one flag for every command: the memory a
// run may allocate beyond the mapped weights. NaN, infinities, zero and
// negative values are refused when the flag is parsed.
type memoryFlag struct {
	gib float64
	set bool
	// fallback gives the default in GiB and says where it comes from.
	fallback func() (float64, string)
}

func (m *memoryFlag) String() string {
	if m == nil || !m.set {
		return ""
	}
	return strconv.FormatFloat(m.gib, 'g', -1, 64)
}

// Set parses a GiB count.
func (m *memoryFlag) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > 1<<30 {
		return fmt.Errorf("want a positive number of GiB, got %q", s)
	}
	// A limit that rounds to 0 bytes would read as "no limit"; under a
	// KiB no run fits anyway.
	if v < 1.0/(1<<20) {
		return fmt.Errorf("%q GiB is under 1 KiB (9.5367431640625e-07): no run fits in it", s)
	}
	m.gib, m.set = v, true
	return nil
}

// addMemoryFlag registers --max-memory with the available-RAM default.
func addMemoryFlag(fs *flag.FlagSet) *memoryFlag {
	m := &memoryFlag{fallback: func() (float64, string) {
		if b := model.AvailableMemory(); b > 0 {
			return float64(b) / (1 << 30), "available RAM"
		}
		return 0, "no limit: /proc/meminfo is unreadable"
	}}
	fs.Var(m, "max-memory", "`GiB` this run may allocate beyond the memory-mapped weights (activations, caches, logits); default: the available RAM")
	return m
}

// limit returns the limit in bytes (0: none) and how to name it.
func (m *memoryFlag) limit() (int64, string) {
	if m.set {
		return int64(m.gib * (1 << 30)), fmt.Sprintf("--max-memory %g", m.gib)
	}
	gib, why := m.fallback()
	return int64(gib * (1 << 30)), why + "; set --max-memory to change it"
}

// pluginList collects repeated --plugin NAME=PATH.so flags.
type pluginList []string

// addPluginFlag adds --plugin, and --gpu, to a command that takes
// --backend or --backends; the libraries are loaded before the backend is
// parsed, so the spec can name them.
func addPluginFlag(fs *flag.FlagSet) *pluginList {
	addGPUFlag(fs)
	var l pluginList
	fs.Func("plugin", "NAME=PATH.so: load a kernel library (plugin/qwenref_plugin.h) and register NAME for each op it exports, e.g. --backend chunked:delta=NAME (repeatable)", func(v string) error {
		if _, _, err := plugin.ParseFlag(v); err != nil {
			return err
		}
		l = append(l, v)
		return nil
	})
	return &l
}

// loaders are model.OpenOptions.Plugins: one loader per --plugin, in order.
func (l *pluginList) loaders() []func() error {
	var out []func() error
	for _, v := range *l {
		out = append(out, func() error {
			name, path, _ := plugin.ParseFlag(v)
			// dlopen searches the library path, not the working directory,
			// for a name without a slash: "mine.so" must mean ./mine.so.
			if abs, err := filepath.Abs(path); err == nil {
				path = abs
			}
			if _, err := plugin.Load(name, path); err != nil {
				return fmt.Errorf("--plugin: %w", err)
			}
			return nil
		})
	}
	return out
}

// paths are the libraries --plugin names: inputs an --out may not replace.
func (l *pluginList) paths() []string {
	var out []string
	for _, v := range *l {
		_, path, _ := plugin.ParseFlag(v)
		out = append(out, path)
	}
	return out
}

// loadPlugins loads every --plugin given, in order.
func loadPlugins(l *pluginList) error {
	for _, load := range l.loaders() {
		if err := load(); err != nil {
			return err
		}
	}
	return nil
}

// addCheckWeightsFlag registers --check-weights, the scan that the
// non-finite-logits error points to.
func addCheckWeightsFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("check-weights", false, "scan every weight matrix for NaN/Inf before running and name the first bad tensor (reads the whole checkpoint)")
}

// openFlags are what a command passes to model.Open from its flags; a nil
// field is a flag the command does not have.
type openFlags struct {
	dir, backend *string
	plugins      *pluginList
	mem          *memoryFlag
	checkW       *bool
}

// open opens --model (or the bundled demo, whose tokenizer goes to *tok
// when tok is set) on --backend with o's checks, telling stderr and info
// (what --quiet drops) what happens.
func (f openFlags) open(o model.OpenOptions, tok **tokenizer.Tokenizer, stderr, info io.Writer) (*model.Opened, error) {
	o.Model, o.Prefault, o.Log, o.Notices = *f.dir, true, info, stderr
	if f.backend != nil {
		o.Backend = *f.backend
	}
	if f.plugins != nil {
		o.Plugins = f.plugins.loaders()
	}
	if f.mem != nil {
		o.MaxMemory, o.MemorySource = f.mem.limit()
	}
	o.CheckWeights = f.checkW != nil && *f.checkW
	o.Default = func() (*model.Model, error) {
		fmt.Fprintf(stderr, "%s\n\n", bundled.Notice)
		m, t, err := bundled.Model()
		if tok != nil {
			*tok = t
		}
		return m, err
	}
	return model.Open(o)
}

// textTokenizer is the tokenizer of an opened model: --tokenizer, the
// checkpoint's, or the bundled demo's (demo, when the demo is open).
// openText opens the model as of does and loads its text tokenizer (see
// textTokenizer): what chat, run and serve start with. The caller closes
// op; on an error nothing is left open.
func (of openFlags) openText(opts model.OpenOptions, tokPath string, stderr, info io.Writer) (*model.Opened, *tokenizer.Tokenizer, error) {
	var demo *tokenizer.Tokenizer
	op, err := of.open(opts, &demo, stderr, info)
	if err != nil {
		return nil, nil, err
	}
	tok, err := textTokenizer(op, tokPath, demo, stderr)
	if err != nil {
		op.Close()
		return nil, nil, err
	}
	return op, tok, nil
}

func textTokenizer(op *model.Opened, tokPath string, demo *tokenizer.Tokenizer, stderr io.Writer) (*tokenizer.Tokenizer, error) {
	switch {
	case op.Dir != "":
		return generate.LoadTokenizer(op.Dir, tokPath, op.Model.Config.VocabSize, bundled.Tokenizer, renamed{stderr, op.Dir, shown(op.Dir)})
	case tokPath != "":
		return tokenizer.Load(tokPath)
	case demo != nil:
		return demo, nil
	}
	return bundled.Tokenizer()
}

// renamed writes to w with old replaced by new.
type renamed struct {
	w        io.Writer
	old, new string
}

func (r renamed) Write(p []byte) (int, error) {
	_, err := io.WriteString(r.w, strings.ReplaceAll(string(p), r.old, r.new))
	return len(p), err
}

// isTerminal reports whether f (a writer or a reader) is a character
// device (a terminal), where progress can rewrite one line.
func isTerminal(v any) bool {
	if s, ok := v.(*stdoutWriter); ok {
		v = s.w // Main's stdout
	}
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	return term.IsTerminal(int(f.Fd())) // not /dev/null, a character device too
}

// resolveModelFlag replaces the --model value *dir with its directory
// (model.ResolveModel).
func resolveModelFlag(dir *string, stderr io.Writer) error {
	d, err := model.ResolveModel(*dir, stderr)
	if d != *dir {
		typed[d] = *dir // the line above gave the snapshot's path once
	}
	*dir = d
	return err
}

// typed maps a hub snapshot's directory to the org/name given for it:
// later notes name the checkpoint as typed (shown), not by its long path.
var typed = map[string]string{}

func shown(dir string) string { return cmp.Or(typed[dir], dir) }
