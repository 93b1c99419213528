package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// RunOptions.Out: a runner writes the logits into the caller's tensor
// (reusing its Data when it has room, growing it otherwise) and returns
// it, and the values are the same as without Out, on every backend this
// machine runs (the device-resident cuda runner included where a GPU is).
func TestRunnerOutReusesBuffer(t *testing.T) {
	m, _, ids := firstGolden(t)
	v := m.Config.VocabSize
	for _, name := range BackendNames() {
		be, err := ParseBackend(name)
		if err != nil {
			t.Logf("skipping backend %s: %v", name, err)
			continue
		}
		t.Run(name, func(t *testing.T) {
			run := func(useOut bool) (prefill []float32, steps [][]float32) {
				r, err := NewRunner(m, be, 1)
				require.NoError(t, err)
				defer r.Close()
				var out *tensor.Tensor
				if useOut {
					out = &tensor.Tensor{Data: make([]float32, 0, 2*v)} // room for a step, not the prefill
				}
				lg, err := r.Forward([][]int{ids[:len(ids)-3]}, RunOptions{Logits: AllLogits, Out: out})
				require.NoError(t, err)
				assert.Equal(t, []int{1, len(ids) - 3, v}, lg.Shape)
				if useOut {
					assert.Same(t, out, lg, "the caller's tensor is the result")
				}
				prefill = append([]float32(nil), lg.Data...)
				for _, id := range ids[len(ids)-3:] {
					before := lg.Data
					lg, err = r.Forward([][]int{{id}}, RunOptions{Logits: LastLogits, Out: out})
					require.NoError(t, err)
					assert.Equal(t, []int{1, 1, v}, lg.Shape)
					if useOut {
						assert.Same(t, &before[0], &lg.Data[0], "a step reuses the buffer the prefill grew")
					}
					steps = append(steps, append([]float32(nil), lg.Data...))
				}
				return prefill, steps
			}
			p0, s0 := run(false)
			p1, s1 := run(true)
			assert.Equal(t, p0, p1, "prefill logits with and without Out")
			assert.Equal(t, s0, s1, "decode logits with and without Out")
		})
	}
}

// CompareBackends measures every other registered backend against the
// reference: naive agrees with chunked within fp32 rounding at every
// position, and a backend that cannot open here says why.
func TestCompareBackends(t *testing.T) {
	m, _, ids := firstGolden(t)
	ref, err := ParseBackend("chunked")
	require.NoError(t, err)
	as, err := CompareBackends(m, ref, ids, false)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, a := range as {
		seen[a.Backend] = true
		if a.Backend == "naive" {
			assert.Empty(t, a.Why)
			assert.Less(t, a.RelL2, 1e-5)
			assert.Equal(t, len(ids), a.Positions)
			assert.Equal(t, a.Positions, a.Argmax)
			assert.Contains(t, a.String(), "naive: rel L2 ")
		} else if a.Why != "" {
			assert.Regexp(t, "^(unavailable|failed): ", a.Why, a.Backend)
		}
	}
	assert.True(t, seen["naive"])
	assert.False(t, seen["chunked"], "the reference is not compared with itself")
}

// Backends that failed to open for one reason make one note naming them
// all; the compared and skipped ones stay.
func TestSplitUnavailable(t *testing.T) {
	gpu := "unavailable: cuda: missing libcuda.so.1"
	rest, notes := SplitUnavailable([]Agreement{
		{Backend: "naive", RelL2: 1e-6, Positions: 3, Argmax: 3},
		{Backend: "cuda", Why: gpu}, {Backend: "cuda-fp32", Why: gpu},
		{Backend: "x", Why: "unavailable: other"}, {Backend: "y", Why: "skipped (~30 GFLOP)"},
	})
	assert.Equal(t, []string{"cuda, cuda-fp32 unavailable: cuda: missing libcuda.so.1", "x unavailable: other"}, notes)
	require.Len(t, rest, 2)
	assert.Equal(t, "naive", rest[0].Backend)
	assert.Equal(t, "y", rest[1].Backend)
}
