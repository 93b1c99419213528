package model

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// Every name the grammar offers (each base, and each part's choices on the
// chunked base) must parse and run the golden model to naive's logits.
// Choices this CPU cannot run (matmul=bf16 without AVX512_BF16) must be
// refused with a message that names what is missing.
func TestEveryBackendNameParsesAndRuns(t *testing.T) {
	root, cases := goldenCases(t)
	dir := filepath.Join(root, cases[0].Name)
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	ids := readInputs(t, dir).IDs[0][:20]
	ref, err := NewBackend("naive")
	require.NoError(t, err)
	want, err := m.NewSession().Forward(ids, ref, Options{})
	require.NoError(t, err)

	specs := BackendNames()
	for _, part := range Parts {
		for _, name := range PartChoices(part) {
			specs = append(specs, fmt.Sprintf("chunked:%s=%s", part, name))
		}
	}
	require.Greater(t, len(specs), 10)
	for _, spec := range specs {
		be, err := ParseBackend(spec)
		if err != nil {
			if strings.Contains(spec, "matmul=bf16") {
				assert.ErrorContains(t, err, "AVX512_BF16", spec)
				continue
			}
			if strings.HasPrefix(spec, "cuda") || strings.Contains(spec, "=cuda") {
				t.Logf("%s: %v (no GPU here)", spec, err)
				continue
			}
			t.Errorf("%s: %v", spec, err)
			continue
		}
		r, err := NewRunner(m, be, 1) // a device-resident backend runs its own model
		var lg *tensor.Tensor
		if err == nil {
			lg, err = r.Forward([][]int{ids}, RunOptions{Logits: AllLogits})
			require.NoError(t, r.Close())
		}
		if err != nil && strings.Contains(spec, "cuda") {
			// The GPU backends' own golden tests (golden_cuda_test.go) hold
			// them to their bounds; here a shape they do not take is fine.
			t.Logf("%s: %v", spec, err)
			require.NoError(t, be.Close())
			continue
		}
		require.NoError(t, err, spec)
		got := &tensor.Tensor{Data: lg.Data}
		bar := 1e-5
		if bf16Backends[spec] || strings.Contains(spec, "bf16") || strings.Contains(spec, "cuda") {
			bar = bf16RelL2
		}
		assert.LessOrEqual(t, tensor.RelL2(got.Data, want.Data), bar, spec)
		assert.Equal(t, spec, be.Name)
		require.NoError(t, be.Close())
	}
}

func TestParseBackendErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"metal":                           `unknown backend "metal" (this build has: naive, chunked`,
		"cudax":                           "the CUDA backends are registered by importing github.com/qwenref/qwenref/cuda",
		"chunked:delta=nosuch":            `unknown delta kernel "nosuch" (choose from: naive, chunked`,
		"chunked:kernel=naive":            "not PART=NAME with PART one of matmul, conv, delta, attn",
		"chunked:delta=naive:delta=naive": "delta given twice",
		"chunked:delta":                   "not PART=NAME",
	} {
		_, err := ParseBackend(spec)
		assert.ErrorContains(t, err, want, spec)
	}
	assert.Error(t, RegisterKernel("delta", "a:b", "", nil), "names may not hold the grammar's separators")
	assert.Error(t, RegisterKernel("softmax", "x", "", nil), "unknown part")
	assert.Error(t, RegisterKernel("delta", "recurrent", "", nil), "taken")
}

// A device-resident backend refuses part swaps before building anything.
func TestResidentBackendRefusesSwaps(t *testing.T) {
	RegisterBackend("test-resident", "a stand-in device-resident backend", func() (*Backend, error) {
		return &Backend{Name: "test-resident", NewRunner: func(*Model, int) (Runner, error) { return nil, nil }}, nil
	})
	defer func() {
		regMu.Lock()
		delete(registry, "test-resident")
		delete(regHelp, "test-resident")
		regMu.Unlock()
	}()
	_, err := ParseBackend("test-resident:delta=naive")
	assert.ErrorContains(t, err, "part swaps (which would copy activations off it) are not allowed")
	_, err = ParseBackend("chunked:delta=test-resident")
	assert.ErrorContains(t, err, "runs only as a whole-model backend")
}
