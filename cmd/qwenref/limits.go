package main

import (
	"fmt"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/weights"
)

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

// maxTopProbs caps `run --top-probs`: more than a screenful per token.
const maxTopProbs = 100

// maxTraceValues caps `trace --values`: beyond a screenful, use --out.
const maxTraceValues = 1 << 16

// checkTrace bounds `trace`, which keeps a copy of every stage of every layer
// (about one layer's activations per layer, plus the run), and its heap.
func checkTrace(cfg *model.Config, mem *memoryFlag, tokens int) error {
	if err := cfg.CheckLength(tokens, "ids"); err != nil {
		return err
	}
	need, err := model.EstimateTrace(cfg, tokens)
	if err != nil {
		return err
	}
	if limit, source := mem.limit(); limit > 0 && need > limit {
		return fmt.Errorf("tracing %d tokens keeps every stage of %d layers, about %s, over the limit of %.3g GiB (%s): trace fewer tokens",
			tokens, cfg.NumLayers, safeio.FormatBytes(need), float64(limit)/(1<<30), source)
	}
	model.BoundHeap(need)
	return nil
}
