package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/weights"
)

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
	m.gib, m.set = v, true
	return nil
}

// availableRAM is the default limit: MemAvailable of /proc/meminfo.
func availableRAM() (float64, string) {
	if b := memAvailable(); b > 0 {
		return float64(b) / (1 << 30), "available RAM"
	}
	return 0, "no limit: /proc/meminfo is unreadable"
}

// addMemoryFlag registers --max-memory with the available-RAM default.
func addMemoryFlag(fs *flag.FlagSet) *memoryFlag {
	m := &memoryFlag{fallback: availableRAM}
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

// checkRun bounds a run before any of its memory is allocated: every
// sequence within max_position_embeddings, and the estimate of EstimateMemory
// under the limit. what names the ids' argument for the message.
func checkRun(cfg *model.Config, mem *memoryFlag, rows, tokens, logitRows int, what string) error {
	if err := cfg.CheckLength(tokens, what); err != nil {
		return err
	}
	limit, source := mem.limit()
	return model.CheckMemory(cfg, rows, tokens, logitRows, limit, source)
}

// addCheckWeightsFlag registers --check-weights, the scan that the
// non-finite-logits error points to.
func addCheckWeightsFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("check-weights", false, "scan every weight matrix for NaN/Inf before running and name the first bad tensor (reads the whole checkpoint)")
}

// checkWeights scans m's matrices with a progress line on stderr.
func checkWeights(m *model.Model, stderr io.Writer) error {
	start, last := time.Now(), time.Time{}
	err := m.CheckFinite(func(done, total int64) {
		if time.Since(last) < 200*time.Millisecond && done < total {
			return
		}
		last = time.Now()
		fmt.Fprintf(stderr, "\rchecking weights: %5.1f%% of %.2f GB", 100*float64(done)/float64(total), float64(total)/1e9)
	})
	fmt.Fprintln(stderr)
	if err != nil {
		return fmt.Errorf("--check-weights: %w", err)
	}
	fmt.Fprintf(stderr, "checking weights: every matrix is finite (%v)\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// modelInputs lists the files of a checkpoint directory a command reads,
// so that no output may replace one of them.
func modelInputs(dir string, m *model.Model) []string {
	in := []string{filepath.Join(dir, "config.json"), filepath.Join(dir, "generation_config.json"),
		filepath.Join(dir, weights.IndexFile), filepath.Join(dir, "tokenizer.json")}
	if m != nil {
		in = append(in, m.Files()...)
	}
	return in
}

// outputFor checks --out before any work (absent or a regular file, none
// of the inputs) and returns the options its writer must use, which check
// again at the rename.
func outputFor(flagName, path string, inputs ...string) (weights.WriteOptions, error) {
	opts := weights.WriteOptions{Inputs: inputs}
	if _, _, err := safeio.CheckTarget(path, opts); err != nil {
		return opts, fmt.Errorf("%s: %w", flagName, err)
	}
	return opts, nil
}

// goldenMemory bounds `golden` before it allocates: every dimension
// positive (the past P may be 0) and at most model.MaxDim, and the vectors
// (float32 tensors written plus their float64 reference, about 24 bytes a
// value) under the memory limit.
func goldenMemory(op string, d reference.VectorDims, mem *memoryFlag) error {
	dims := map[string]int{"--seq": d.T}
	var perT, fixed []int
	switch op {
	case "gdn-core":
		dims["--nk"], dims["--nv"], dims["--dk"], dims["--dv"] = d.NK, d.NV, d.DK, d.DV
		perT = []int{2*d.NK*d.DK + 3*d.NV*d.DV + 2*d.NV}
		fixed = []int{2, d.NV, d.DK, d.DV}
	case "conv":
		dims["--channels"], dims["--kernel"] = d.C, d.K
		perT = []int{2 * d.C}
		fixed = []int{d.C, d.K}
	case "attention":
		dims["--heads"], dims["--kv-heads"], dims["--head-dim"] = d.NH, d.NKV, d.D
		perT = []int{d.T + d.P, d.NH}
		fixed = []int{d.T + d.P, 2*d.NH + 4*d.NKV, d.D}
	}
	for name, v := range dims {
		if v < 1 || v > model.MaxDim {
			return fmt.Errorf("%s %d: want 1 to %d", name, v, model.MaxDim)
		}
	}
	if d.P < 0 || d.P > model.MaxDim {
		return fmt.Errorf("--past %d: want 0 to %d", d.P, model.MaxDim)
	}
	limit, source := mem.limit()
	a, ok1 := mulInts(append([]int{d.T}, perT...)...)
	b, ok2 := mulInts(fixed...)
	if total := (a + b) * 24; !ok1 || !ok2 || total < 0 || limit > 0 && total > limit {
		return fmt.Errorf("%s %s needs more than the limit of %.3g GiB (%s): choose a smaller --seq or dims",
			op, d.Describe(op), float64(limit)/(1<<30), source)
	}
	return nil
}

// mulInts multiplies, reporting false past 2^50 (far over any RAM).
func mulInts(fs ...int) (int64, bool) {
	p := int64(1)
	for _, f := range fs {
		if f < 0 || f > 0 && p > (1<<50)/int64(f) {
			return 0, false
		}
		p *= int64(f)
	}
	return p, true
}

// maxTraceValues caps `trace --values`: more than a screenful per stage is
// what --out is for.
const maxTraceValues = 1 << 16

// maxIDsFileBytes caps an ids JSON file read by trace (docs/limits.md).
const maxIDsFileBytes = 64 << 20

// checkTrace bounds `trace`, which keeps a copy of every stage of every
// layer: about one layer's activations per layer, plus the run itself.
func checkTrace(cfg *model.Config, mem *memoryFlag, tokens int) error {
	if err := cfg.CheckLength(tokens, "ids"); err != nil {
		return err
	}
	est, err := model.EstimateMemory(cfg, 1, tokens, tokens)
	if err != nil {
		return err
	}
	need := est.Total() + est.Activations*int64(cfg.NumLayers)
	if limit, source := mem.limit(); limit > 0 && need > limit {
		return fmt.Errorf("tracing %d tokens keeps every stage of %d layers, about %.2f GiB, over the limit of %.3g GiB (%s): trace fewer tokens",
			tokens, cfg.NumLayers, float64(need)/(1<<30), float64(limit)/(1<<30), source)
	}
	return nil
}
