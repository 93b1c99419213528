package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/weights"
)

// SynthOptions control WriteSynthetic.
type SynthOptions struct {
	Seed       uint64
	ShardBytes int64 // target shard size; 0 means 4 GiB
	// Progress, if set, is called as bytes are written (from one goroutine
	// at a time).
	Progress func(done, total int64)
}

// SyntheticBytes is the size of the bf16 checkpoint WriteSynthetic writes.
func SyntheticBytes(cfg *Config) int64 {
	var n int64
	for _, e := range cfg.ExpectedTensors() {
		n += 2 * int64(numel(e.Shape))
	}
	return n
}

func numel(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// WriteSynthetic writes a bf16 checkpoint of cfg with the deterministic
// random weights of NewRandom(cfg, opt.Seed, true), in the hub layout
// (model.language_model.* names, shards with an index, config.json), into
// dir. Memory stays bounded: each tensor is generated and written in pieces
// of 1 Mi values, two tensors at a time. Loading the result gives exactly
// the model NewRandom builds. On error, the files written so far are
// removed; config.json is written last, so a partial directory never loads.
func WriteSynthetic(dir string, cfg *Config, configJSON []byte, opt SynthOptions) (err error) {
	if opt.ShardBytes <= 0 {
		opt.ShardBytes = 4 << 30
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return fmt.Errorf("%s already holds a checkpoint (config.json): choose an empty directory", dir)
	}
	// Assign tensors to shards in checkpoint order until each is full.
	type shard struct {
		headers []weights.TensorHeader
		bytes   int64
	}
	var shards []*shard
	cur := &shard{}
	specs := map[string]TensorSpec{} // by stored name
	for _, e := range cfg.ExpectedTensors() {
		specs[e.Hub] = e
		b := 2 * int64(numel(e.Shape))
		if cur.bytes > 0 && cur.bytes+b > opt.ShardBytes {
			shards = append(shards, cur)
			cur = &shard{}
		}
		cur.headers = append(cur.headers, weights.TensorHeader{Name: e.Hub, DType: "BF16", Shape: e.Shape})
		cur.bytes += b
	}
	shards = append(shards, cur)

	var written []string
	defer func() {
		if err != nil {
			for _, f := range written {
				os.Remove(f)
			}
		}
	}()
	total := SyntheticBytes(cfg)
	var done int64
	var mu sync.Mutex
	report := func(n int64) {
		if opt.Progress == nil {
			return
		}
		mu.Lock()
		done += n
		opt.Progress(done, total)
		mu.Unlock()
	}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := weights.ShardName(i+1, len(shards))
		path := filepath.Join(dir, name)
		w, err := weights.NewStreamWriter(path, sh.headers, map[string]string{"producer": "qwenref synth", "seed": fmt.Sprint(opt.Seed)})
		if err != nil {
			return err
		}
		for _, h := range sh.headers {
			weightMap[h.Name] = name
		}
		// Two tensors in flight keep both cores busy generating values.
		order := w.Order()
		errs := make(chan error, len(order))
		sem := make(chan struct{}, 2)
		var wg sync.WaitGroup
		for _, stored := range order {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				spec := specs[stored]
				shape := spec.Shape
				f := NewRandomFiller(opt.Seed, spec)
				buf := make([]float32, 1<<20)
				for left := numel(shape); left > 0; {
					n := min(left, len(buf))
					f.Fill(buf[:n])
					if err := w.Append(stored, buf[:n]); err != nil {
						errs <- err
						return
					}
					left -= n
					report(2 * int64(n))
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			_ = w.Abort()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		written = append(written, path)
	}
	if err := weights.WriteIndex(dir, weightMap, total); err != nil {
		return err
	}
	written = append(written, filepath.Join(dir, weights.IndexFile))
	tmp := filepath.Join(dir, ".config.json.tmp")
	if err := os.WriteFile(tmp, configJSON, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "config.json")); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return nil
}

// CheckSyntheticOut accepts an output for WriteSynthetic: a new path in
// an existing directory, or an empty directory (not a link: a link to a
// directory is refused naming that directory); errors name it as --out.
func CheckSyntheticOut(out string) error {
	st, err := os.Lstat(out)
	switch {
	case errors.Is(err, os.ErrNotExist):
		parent := filepath.Dir(filepath.Clean(out))
		if pst, err := os.Stat(parent); err != nil || !pst.IsDir() {
			return fmt.Errorf("--out %s: the parent directory %s does not exist", safeio.Clean(out), safeio.Clean(parent))
		}
		return nil
	case err != nil:
		return fmt.Errorf("--out: %w", err)
	case st.Mode()&os.ModeSymlink != 0:
		// The finished checkpoint is renamed onto --out, which would
		// replace the link, not fill the directory it points to.
		if target, err := filepath.EvalSymlinks(out); err == nil {
			if tst, err := os.Stat(target); err == nil && tst.IsDir() {
				return fmt.Errorf("--out %s is a symbolic link to the directory %s: name that directory itself", safeio.Clean(out), safeio.Clean(target))
			}
		}
		return fmt.Errorf("--out %s is a symbolic link: name a new or empty directory", safeio.Clean(out))
	case !st.IsDir():
		return fmt.Errorf("--out %s: exists and is a %s, not a directory", safeio.Clean(out), safeio.Kind(st.Mode()))
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("--out %s: the directory is not empty (it holds %s): choose a new or empty directory", safeio.Clean(out), safeio.Quote(entries[0].Name()))
	}
	return nil
}
