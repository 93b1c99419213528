package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// memModel writes the tiny shape with a 2,048-token vocabulary, so that the
// activations, not the logits or the weights, dominate a run's memory.
func memModel(t *testing.T) string {
	js, err := model.ShapeConfigJSON("tiny")
	require.NoError(t, err)
	js = []byte(strings.Replace(string(js), `"vocab_size":151936`, `"vocab_size":2048`, 1))
	cfg, err := model.ParseConfig(js)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "m")
	require.NoError(t, model.WriteSynthetic(dir, cfg, js, model.SynthOptions{Seed: 1}))
	return dir
}

var needAbout = regexp.MustCompile(`about ([0-9.]+) (MiB|GiB)`)

// estimateOf runs args with a limit nothing fits and reads the estimate
// from the refusal, in bytes.
func estimateOf(t *testing.T, args ...string) float64 {
	code, _, stderr := runCLI(append(args, "--max-memory", "0.000001")...)
	require.NotEqual(t, 0, code, stderr)
	m := needAbout.FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	if m[2] == "GiB" {
		return v * (1 << 30)
	}
	return v * (1 << 20)
}

// Each command's estimate holds its measured peak: the child process's
// VmHWM less that of the same command on 8 tokens (the runtime and the
// paged-in weights), at three sizes (one under -short, about 2 s), is at
// most the estimate and at least 0.8× it. The commands bound the Go heap
// to the estimate (model.BoundHeap); before that bound the peaks were up
// to 3× the estimates.
func TestMemoryEstimatesHold(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory is in every peak")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("VmHWM is read from /proc (Linux)")
	}
	dir := memModel(t)
	sizes := []int{1000, 2000, 4000}
	if testing.Short() {
		sizes = sizes[:1]
	}
	ids := func(n int) string {
		s := make([]int, n)
		for i := range s {
			s[i] = 1 + i%2000
		}
		return writeIDs(t, t.TempDir(), [][]int{s})
	}
	cmds := map[string]func(n int) []string{
		"forward": func(n int) []string {
			return []string{"forward", "--model", dir, "--ids-json", ids(n), "--out", filepath.Join(t.TempDir(), "o.safetensors")}
		},
		"perplexity": func(n int) []string {
			return []string{"perplexity", "--model", dir, "--ids-json", ids(n), "--ctx", strconv.Itoa(n)}
		},
		"generate": func(n int) []string {
			return []string{"generate", "--model", dir, "--ids-json", ids(n), "--max-new-tokens", "4"}
		},
		"trace": func(n int) []string {
			return []string{"trace", "--model", dir, "--ids-json", ids(n), "--all", "--out", filepath.Join(t.TempDir(), "o.safetensors")}
		},
	}
	for name, args := range cmds {
		base := runChild(t, args(8)...)
		require.Equal(t, 0, base.code, base.stderr)
		for _, n := range sizes {
			est := estimateOf(t, args(n)...)
			r := runChild(t, args(n)...)
			require.Equal(t, 0, r.code, r.stderr)
			peak := float64(r.peakKB-base.peakKB) * 1024
			t.Logf("%s %d tokens: estimate %.1f MiB, peak %.1f MiB (%.2f×)", name, n, est/(1<<20), peak/(1<<20), est/peak)
			assert.GreaterOrEqual(t, est, peak, "%s %d tokens: the estimate is under the peak", name, n)
			assert.LessOrEqual(t, est, 1.25*peak, "%s %d tokens: the estimate is over 1.25× the peak", name, n)
		}
	}
}
