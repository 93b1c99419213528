//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/weights"
)

// TestFeaturesResumeAfterSIGINT interrupts a real run with SIGINT once its
// first shard is on disk: the run stops (exit 130, or killed by the
// signal between writes) and leaves no temporary file or torn shard, and running the same command again finishes it with
// every file byte for byte what an uninterrupted run writes.
func TestFeaturesResumeAfterSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process for a few seconds")
	}
	tmp := t.TempDir()
	args := featuresRun(t, tmp, 3, 600)
	whole := filepath.Join(tmp, "whole")
	code, _, stderr := runCLI(args(whole)...)
	require.Equal(t, 0, code, stderr)

	cut := filepath.Join(tmp, "cut")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args(cut)...)...)
	cmd.Env = append(os.Environ(), "QWENREF_HOSTILE_CHILD=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	first := filepath.Join(cut, "shard-00000.safetensors")
	for {
		if _, err := os.Stat(first); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended before its first shard was seen (%v): %s", err, errOut.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := <-done
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, errOut.String())
	// Exit 130 when a temp file's handler caught it, or the default death by
	// SIGINT between writes, when no temp file is open.
	ws, _ := exit.Sys().(syscall.WaitStatus)
	require.True(t, exit.ExitCode() == 130 || ws.Signaled() && ws.Signal() == syscall.SIGINT, "exit %v: %s", exit, errOut.String())
	left, err := os.ReadDir(cut)
	require.NoError(t, err)
	shards := 0
	for _, e := range left {
		name := e.Name()
		require.True(t, name == "manifest.json" || strings.HasPrefix(name, "shard-") && strings.HasSuffix(name, ".safetensors"),
			"the interrupted run left %s", name)
		if name != "manifest.json" {
			s, err := weights.Open(filepath.Join(cut, name))
			require.NoError(t, err, "a torn shard")
			require.NoError(t, s.Close())
			shards++
		}
	}
	wholeFiles, err := os.ReadDir(whole)
	require.NoError(t, err)
	require.Less(t, shards, len(wholeFiles)-1, "the signal came after the last shard: the test interrupted nothing")
	t.Logf("interrupted after %d of %d shards", shards, len(wholeFiles)-1)

	code, _, stderr = runCLI(args(cut)...)
	require.Equal(t, 0, code, stderr)
	for _, e := range wholeFiles {
		want, err := os.ReadFile(filepath.Join(whole, e.Name()))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(cut, e.Name()))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "%s differs from the uninterrupted run's", e.Name())
	}
}

// featuresRun writes a 2-layer tiny checkpoint and a JSONL of samples
// random samples (50 to 399 ids, from seed) under tmp, and returns the
// arguments of a features run of them into out, in shards of 1 MB.
func featuresRun(t *testing.T, tmp string, seed uint64, samples int) func(out string) []string {
	t.Helper()
	dir := filepath.Join(tmp, "ck")
	code, _, stderr := runCLI("synth", "--shape", "tiny", "--layers", "2", "--out", dir)
	require.Equal(t, 0, code, stderr)
	var lines strings.Builder
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for range samples {
		ids := make([]string, 50+rng.IntN(350))
		for j := range ids {
			ids[j] = strconv.Itoa(1 + rng.IntN(2000))
		}
		fmt.Fprintf(&lines, "{\"ids\":[%s]}\n", strings.Join(ids, ","))
	}
	data := filepath.Join(tmp, "d.jsonl")
	require.NoError(t, os.WriteFile(data, []byte(lines.String()), 0o644))
	return func(out string) []string {
		return []string{"features", "--model", dir, "--data", data, "--out", out, "--layers", "0,1", "--shard-mb", "1"}
	}
}
