package model

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/conv1d"
)

const openGolden = "../testdata/golden/causal-f16-t130"

// openReleases counts the releases of the test-open backend, whose
// device refuses every shape.
var openReleases atomic.Int64

func init() {
	RegisterBackend("test-open", "test only: chunked, on a device that refuses every shape", func() (*Backend, error) {
		be, err := newBase("chunked")
		if err != nil {
			return nil, err
		}
		be.Name = "test-open"
		be.Device = &Device{Name: "test", Supports: func(*Config) error { return UnsupportedShape("too wide\nand too deep") }}
		be.Release = func() error { openReleases.Add(1); return nil }
		return be, nil
	})
}

// Open runs the whole sequence on a checkpoint: the plug-ins before the
// backend spec that names their kernel, the backend, Load, the ids, the
// run's size, the command's check, the backend's refusals (as notices),
// the weight scan; Close releases the backend.
func TestOpenCheckpoint(t *testing.T) {
	pluginRan := false
	plugin := func() error {
		pluginRan = true
		return registerOnce("conv", "test-open-conv")
	}
	var log, notices bytes.Buffer
	var checked *Opened
	releases := openReleases.Load()
	op, err := Open(OpenOptions{Model: openGolden, Backend: "test-open:conv=test-open-conv", Plugins: []func() error{plugin},
		IDs: [][]int{{1, 2, 3}}, IDsName: "--ids", Run: &RunSize{Rows: 1, Tokens: 3, LogitRows: 3, What: "--ids"},
		Check: func(o *Opened) error { checked = o; return nil }, CheckWeights: true, Prefault: true, Log: &log, Notices: &notices})
	require.NoError(t, err)
	assert.True(t, pluginRan)
	assert.Same(t, op, checked, "the command's check sees what Open returns")
	assert.Equal(t, openGolden, op.Dir)
	assert.Equal(t, "test-open:conv=test-open-conv", op.Backend.Name)
	assert.Equal(t, 96, op.Model.Config.VocabSize)
	assert.Contains(t, log.String(), "checking weights: every matrix is finite")
	assert.Equal(t, "notice: backend test-open:conv=test-open-conv: too wide\nnotice: backend test-open:conv=test-open-conv: and too deep\n", notices.String(),
		"each line of a refusal is a notice; the 3 MB checkpoint is not prefaulted (under 256 MiB)")
	in := op.Inputs()
	assert.Contains(t, in, filepath.Join(openGolden, "config.json"))
	assert.Contains(t, in, filepath.Join(openGolden, "model.safetensors"))
	require.NoError(t, op.Close())
	assert.Equal(t, releases+1, openReleases.Load(), "Close releases the backend")
}

func registerOnce(part, name string) error {
	regMu.Lock()
	_, done := variants[part][name]
	regMu.Unlock()
	if done {
		return nil
	}
	return RegisterKernel(part, name, "test only", func() (any, error) { return conv1d.Naive{}, nil })
}

// Every step's failure is reported with its own message, and whatever was
// opened before it is closed.
func TestOpenFailures(t *testing.T) {
	opts := func(edit func(*OpenOptions)) OpenOptions {
		o := OpenOptions{Model: openGolden, Backend: "test-open"}
		edit(&o)
		return o
	}
	for _, c := range []struct {
		name   string
		opts   OpenOptions
		want   string
		opened bool // the backend was opened before the failure
	}{
		{"plug-in", opts(func(o *OpenOptions) {
			o.Plugins = []func() error{func() error { return errors.New("--plugin: no such library") }}
		}), "--plugin: no such library", false},
		{"backend before the model", opts(func(o *OpenOptions) { o.Backend, o.Model = "nosuch", "/nonexistent" }), `unknown backend "nosuch"`, false},
		{"no such directory", opts(func(o *OpenOptions) { o.Model = "/nonexistent" }), "--model /nonexistent: no such directory, nor a Hugging Face repo id", true},
		{"a name that is not plain text, escaped", opts(func(o *OpenOptions) { o.Model = "/no\x1b[31mred" }), `--model /no\x1b[31mred: no such directory`, true},
		{"no model", opts(func(o *OpenOptions) { o.Model = "" }), "no model given", true},
		{"ids", opts(func(o *OpenOptions) { o.IDs, o.IDsName = [][]int{{1}, {96}}, "--ids-json" }), "--ids-json row 1: token id 96 at position 0 is outside the vocabulary [0, 96)", true},
		{"length", opts(func(o *OpenOptions) { o.Run = &RunSize{Rows: 1, Tokens: 1 << 30, LogitRows: 1, What: "--ctx"} }), "--ctx", true},
		{"memory", opts(func(o *OpenOptions) {
			o.Run, o.MaxMemory, o.MemorySource = &RunSize{Rows: 8, Tokens: 4096, LogitRows: 8 * 4096, What: "ids"}, 1<<20, "--max-memory 0.001"
		}), "--max-memory 0.001", true},
		{"check", opts(func(o *OpenOptions) { o.Check = func(*Opened) error { return errors.New("--out is the checkpoint") } }), "--out is the checkpoint", true},
	} {
		releases := openReleases.Load()
		op, err := Open(c.opts)
		assert.Nil(t, op, c.name)
		assert.ErrorContains(t, err, c.want, c.name)
		if c.opened {
			assert.Equal(t, releases+1, openReleases.Load(), "%s: the backend is closed", c.name)
		}
	}
}

// "" opens the default; a repo id resolves through the Hugging Face cache,
// and the log says where it was found.
func TestOpenDefaultAndHubReference(t *testing.T) {
	def, err := Load(openGolden)
	require.NoError(t, err)
	op, err := Open(OpenOptions{Default: func() (*Model, error) { return def, nil }})
	require.NoError(t, err)
	assert.Same(t, def, op.Model)
	assert.Nil(t, op.Backend)
	assert.Empty(t, op.Dir)
	assert.Equal(t, def.Files(), op.Inputs(), "no directory: the mapped files alone")
	require.NoError(t, op.Close())

	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	commit := strings.Repeat("ab", 20)
	repo := filepath.Join(cache, "models--org--tiny")
	snap := filepath.Join(repo, "snapshots", commit)
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644))
	require.NoError(t, os.MkdirAll(snap, 0o755))
	// As huggingface_hub lays a cache out: the files in blobs/, the
	// snapshot's entries links into them.
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "blobs"), 0o755))
	for i, f := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(openGolden, f))
		require.NoError(t, err)
		blob := fmt.Sprintf("blob%d", i)
		require.NoError(t, os.WriteFile(filepath.Join(repo, "blobs", blob), data, 0o644))
		require.NoError(t, os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, f)))
	}
	var log bytes.Buffer
	op, err = Open(OpenOptions{Model: "org/tiny", Log: &log})
	require.NoError(t, err)
	assert.Equal(t, snap, op.Dir)
	assert.Equal(t, "model: org/tiny@main from the Hugging Face cache, "+snap+"\n", log.String())
	require.NoError(t, op.Close())

	_, err = Open(OpenOptions{Model: "org/absent"})
	assert.ErrorContains(t, err, "--model org/absent: no such directory, and org/absent@main is not in the Hugging Face cache")
}

func TestMemoryFromProcMeminfo(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		assert.Zero(t, AvailableMemory())
		return
	}
	avail, total := AvailableMemory(), TotalMemory()
	assert.Greater(t, avail, int64(0))
	assert.GreaterOrEqual(t, total, avail)
}

// A long generation from a short prompt is charged one prefill of the
// prompt and caches of the whole length, not a prefill of the whole
// length: the activations of 300,000 tokens at once would need 2.5 GB.
func TestCheckGenerationMemory(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	const limit = 1 << 30
	assert.ErrorContains(t, CheckMemory(cfg, 1, 300_000, 16, limit, "test"), "over the limit")
	assert.NoError(t, CheckGenerationMemory(cfg, 1, 16, 300_000, 16, limit, "test"))
	// The caches still count: a long enough generation is refused.
	err = CheckGenerationMemory(cfg, 1, 16, 200_000_000, 16, limit, "test")
	assert.ErrorContains(t, err, "16 at once")
	// prefill 0 or ≥ tokens is the plain check.
	assert.Equal(t, CheckMemory(cfg, 1, 4096, 4096, limit, "test"), CheckGenerationMemory(cfg, 1, 0, 4096, 4096, limit, "test"))
}
