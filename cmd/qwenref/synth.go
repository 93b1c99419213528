package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "synth", summary: "write a synthetic random-weight checkpoint of a named shape (e.g. 27b)", run: runSynth})
}

func runSynth(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synth", "--shape 27b --out DIR [--layers N] [--seed S] [--shard-gb G]", `
Writes a checkpoint with deterministic random bf16 weights in the hub layout
(Qwen3_5ForConditionalGeneration names, shards + model.safetensors.index.json,
config.json) for a named shape. Loading it gives exactly the model that
'bench' and the tests build in memory from the same seed. Memory stays
bounded (each tensor streams to disk in pieces), so the 27B shape (about
54 GB) can be written on a small machine; the free disk space is checked
first. --layers keeps the full width but fewer layers (the 3:1 pattern stays),
for proving large-width behaviour when the disk is short.

Examples:
  qwenref synth --shape 27b --out /data/qwen27b-synth
  qwenref synth --shape 27b --layers 8 --out /tmp/q27-8l   # 8 layers at full width`, stderr)
	shape := fs.String("shape", "27b", "named shape: "+strings.Join(model.ShapeNames(), ", "))
	out := fs.String("out", "", "output directory (created; if it exists it must be empty)")
	layers := fs.Int("layers", 0, "keep only the first N layers (0 = all)")
	seed := fs.Uint64("seed", 1, "weight seed")
	shardGB := fs.Float64("shard-gb", 4, "target shard size in GB")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return usageError(fs, stderr, "missing --out")
	case *layers < 0 || *layers > model.MaxLayers:
		return usageError(fs, stderr, "--layers %d: want 0 (all) to at most %d", *layers, model.MaxLayers)
	case !(*shardGB > 0 && *shardGB <= 1e6):
		return usageError(fs, stderr, "--shard-gb must be in (0, 1e6], got %g", *shardGB)
	}
	if _, err := model.ShapeConfigJSON(*shape); err != nil {
		return err
	}
	if err := model.CheckSyntheticOut(*out); err != nil {
		return err
	}
	js, cfg, err := model.ShapeConfigJSONLayers(*shape, *layers)
	if err != nil {
		return err
	}
	need := model.SyntheticBytes(cfg)
	if free, ok := safeio.FreeBytes(*out); ok && free < need+need/50 {
		f, n := safeio.GBPair(free, need+need/50)
		return fmt.Errorf("%s has %s free but the checkpoint needs %s (its size and a 2%% margin): free space or pass --layers N (full width, fewer layers)",
			safeio.Clean(*out), f, n)
	}
	lin, full := cfg.CountLayers()
	fmt.Fprintf(stderr, "synth: %s, %d layers (%d GDN + %d attention), %d parameters, %.2f GB bf16 → %s\n",
		*shape, cfg.NumLayers, lin, full, cfg.TextParams(), float64(need)/1e9, safeio.Clean(*out))
	// Everything is written into a temporary directory beside --out and
	// renamed into place at the end, so an error or a signal never leaves
	// a partial shard set (safeio removes the directory on SIGINT/SIGTERM,
	// and the next run removes one a killed run left).
	staging, done, err := safeio.TempDir(*out)
	if err != nil {
		return err
	}
	keep := false
	defer func() { done(keep) }()
	start, last, tty := time.Now(), time.Time{}, isTerminal(stderr) // no \r into files and pipes
	shard := max(int64(*shardGB*1e9), 1)                            // under a byte: a tensor a shard, not the default (0)
	err = model.WriteSynthetic(staging, cfg, js, model.SynthOptions{Seed: *seed, ShardBytes: shard,
		Progress: func(done, total int64) {
			if !tty || time.Since(last) < 200*time.Millisecond && done < total {
				return
			}
			last = time.Now()
			rate := float64(done) / time.Since(start).Seconds()
			fmt.Fprintf(stderr, "\r  %5.1f%% %.2f/%.2f GB, %.0f MB/s ", 100*float64(done)/float64(total), float64(done)/1e9, float64(total)/1e9, rate/1e6)
		}})
	if tty {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return err
	}
	if err := model.CheckSyntheticOut(*out); err != nil { // it may have changed meanwhile
		return err
	}
	if _, err := os.Lstat(*out); err == nil {
		if err := os.Remove(*out); err != nil { // the empty directory it replaces
			return fmt.Errorf("--out %s: %w", safeio.Clean(*out), err)
		}
	}
	if err := os.Rename(staging, *out); err != nil {
		return fmt.Errorf("--out %s: %w", safeio.Clean(*out), err)
	}
	keep = true
	fmt.Fprintf(stdout, "wrote %s in %v\n", safeio.Clean(*out), time.Since(start).Round(time.Second))
	return nil
}
