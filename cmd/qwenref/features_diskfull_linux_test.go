package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/weights"
)

// TestFeaturesDiskFull runs `qwenref features` onto a small tmpfs mounted
// in the test's own directory. Too small from the start, the run is
// refused before any work. With room at the start but filled by another
// writer after the first shard, the run fails naming the full disk, leaves only
// whole shards and a manifest that lists them (no temporary file, no torn
// shard), and once the file system has room the same command resumes and
// writes every file byte for byte as a run that never ran out. It needs
// root to mount, and skips without it.
func TestFeaturesDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a few MB twice")
	}
	tmp := t.TempDir()
	full := filepath.Join(tmp, "full")
	require.NoError(t, os.Mkdir(full, 0o755))
	if err := syscall.Mount("tmpfs", full, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v): the test needs root", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(full, 0) })

	args := featuresRun(t, tmp, 5, 300)
	whole := filepath.Join(tmp, "whole")
	code, _, stderr := runCLI(args(whole)...)
	require.Equal(t, 0, code, stderr)
	wholeFiles, err := os.ReadDir(whole)
	require.NoError(t, err)
	var size int64
	for _, e := range wholeFiles {
		fi, err := e.Info()
		require.NoError(t, err)
		size += fi.Size()
	}
	require.Greater(t, len(wholeFiles), 3, "too few shards to fill the disk between two of them")
	out := filepath.Join(full, "out")
	// Too small from the start: refused before any work.
	require.NoError(t, syscall.Mount("tmpfs", full, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%dk", size/2/1024)))
	code, _, stderr = runCLI(args(out)...)
	require.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "is free", stderr)
	_, err = os.Stat(out)
	require.True(t, os.IsNotExist(err), "a refused run made %s", out)

	// Room at the start, then another writer takes it once the first
	// shard is down.
	require.NoError(t, syscall.Mount("tmpfs", full, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%dk", size/1024+256)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args(out)...)...)
	cmd.Env = append(os.Environ(), "QWENREF_HOSTILE_CHILD=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		if _, err := os.Stat(filepath.Join(out, "shard-00000.safetensors")); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended before its first shard was seen (%v): %s", err, errOut.String())
		case <-time.After(2 * time.Millisecond):
		}
	}
	filler := filepath.Join(full, "filler")
	f, err := os.Create(filler)
	require.NoError(t, err)
	for _, werr := f.Write(make([]byte, 64<<10)); werr == nil; _, werr = f.Write(make([]byte, 64<<10)) {
	}
	require.NoError(t, f.Close())
	err = <-done
	stderr = errOut.String()
	require.Error(t, err, "the run finished on a full disk: %s", stderr)
	assert.Contains(t, stderr, "no space left on device", stderr)
	assert.Contains(t, stderr, "qwenref features: --out "+out+": ", "the message names --out, where it was writing")
	assert.NotContains(t, stderr, "--data", "the full disk is not the data's fault")
	left, err := os.ReadDir(out)
	require.NoError(t, err)
	shards := 0
	for _, e := range left {
		name := e.Name()
		require.True(t, name == "manifest.json" || strings.HasPrefix(name, "shard-") && strings.HasSuffix(name, ".safetensors"),
			"the failed run left %s", name)
		if name != "manifest.json" {
			s, err := weights.Open(filepath.Join(out, name))
			require.NoError(t, err, "a torn shard")
			require.NoError(t, s.Close())
			shards++
		}
	}
	require.Less(t, shards, len(wholeFiles)-1)
	t.Logf("the disk filled after %d of %d shards: %s", shards, len(wholeFiles)-1, strings.TrimSpace(stderr))

	// Room again, as much as the first run had: the shard the run may have
	// left whole without its manifest counts as free (it is written over).
	require.NoError(t, os.Remove(filler))
	code, _, stderr = runCLI(args(out)...)
	require.Equal(t, 0, code, stderr)
	for _, e := range wholeFiles {
		want, err := os.ReadFile(filepath.Join(whole, e.Name()))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(out, e.Name()))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "%s differs from the run that had room", e.Name())
	}
}
