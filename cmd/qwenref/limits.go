package main

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/weights"
)

// modelInputs lists the files of a checkpoint directory a command reads,
// so that no output may replace one of them.
func modelInputs(dir string, m *model.Model) []string {
	return (&model.Opened{Dir: dir, Model: m}).Inputs()
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
