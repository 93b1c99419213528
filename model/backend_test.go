package model

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/tensor"
)

// Every name the grammar offers (each base, and each part's choices on the
// chunked base) must parse and run the golden model. fp32 specs must give
// naive's logits (relative L2 ≤ 1e-5); bf16 specs (matmul=bf16, the cuda
// ones) may be no further from transformers' fp32 logits than transformers'
// own bf16 run is (expected_bf16.safetensors). Choices this CPU cannot run
// (matmul=bf16 without AVX512_BF16) must be refused with a message that
// names what is missing.
func TestEveryBackendNameParsesAndRuns(t *testing.T) {
	m, dir, ids := firstGolden(t)
	ref, err := ParseBackend("naive")
	require.NoError(t, err)
	want, err := m.NewSession().Forward(ids, ref, Options{})
	require.NoError(t, err)
	n := len(want.Data)
	hfFP32 := goldenTensor(t, dir, "expected.safetensors", "logits")[:n]
	hfBF16 := goldenTensor(t, dir, "expected_bf16.safetensors", "logits")[:n]
	bf16Bar := tensor.RelL2(hfBF16, hfFP32) // transformers' own bf16 distance, row 0
	require.Greater(t, bf16Bar, 1e-3, "the bf16 golden must differ from the fp32 one")

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
		if be.Precision == PrecisionBF16 || bf16Backends[spec] {
			rel := tensor.RelL2(lg.Data, hfFP32)
			t.Logf("%s: rel L2 %.3g from transformers' fp32 logits (transformers' bf16: %.3g)", spec, rel, bf16Bar)
			assert.LessOrEqual(t, rel, bf16Bar, spec)
		} else {
			assert.LessOrEqual(t, tensor.RelL2(lg.Data, want.Data), 1e-5, spec)
		}
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
		return &Backend{Name: "test-resident", Device: &Device{NewRunner: func(*Model, int) (Runner, error) { return nil, nil }}}, nil
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

// bf16Kernel is a matmul that reports bf16; pickyDelta refuses every shape.
type bf16Kernel struct{ linalg.MatMuler }

func (bf16Kernel) Precision() Precision { return PrecisionBF16 }

type pickyDelta struct{ gateddelta.Kernel }

func (pickyDelta) Supports(cfg *Config) error {
	return UnsupportedShape("wants %d-wide heads", cfg.LinearKeyHeadDim*2)
}

// A backend's precision is its factory's, else its kernels' (bf16 when any
// says so); a swap brings the swapped kernel's, so a mix is bf16 when any
// part is. Supports names each refusing part, and the device's refusal.
func TestBackendSaysWhatItIs(t *testing.T) {
	RegisterBackend("test-bf16", "a stand-in with a bf16 matmul and a picky delta", func() (*Backend, error) {
		be, err := newBase("chunked")
		if err != nil {
			return nil, err
		}
		be.Name, be.MatMul, be.Delta = "test-bf16", bf16Kernel{be.MatMul}, pickyDelta{be.Delta}
		be.Device = &Device{Name: "test", Supports: func(*Config) error { return errors.New("the device is too small") }}
		return be, nil
	})
	defer func() {
		regMu.Lock()
		delete(registry, "test-bf16")
		delete(regHelp, "test-bf16")
		regMu.Unlock()
	}()
	for spec, want := range map[string]Precision{
		"naive": PrecisionF32, "chunked": PrecisionF32, "chunked:delta=naive": PrecisionF32,
		"test-bf16": PrecisionBF16, "chunked:matmul=test-bf16": PrecisionBF16, "chunked:delta=test-bf16": PrecisionF32,
		"test-bf16:matmul=chunked": PrecisionF32, "test-bf16:conv=naive": PrecisionBF16,
	} {
		be, err := ParseBackend(spec)
		require.NoError(t, err, spec)
		assert.Equal(t, want, be.Precision, spec)
		require.NoError(t, be.Close())
	}
	if cpu.HasBF16() {
		be, err := ParseBackend("chunked:matmul=bf16")
		require.NoError(t, err)
		assert.Equal(t, PrecisionBF16, be.Precision, "the bf16 variant is registered as bf16")
	}

	cfg := &Config{LinearKeyHeadDim: 16}
	be, err := ParseBackend("test-bf16")
	require.NoError(t, err)
	err = be.Supports(cfg)
	assert.ErrorIs(t, err, ErrUnsupportedShape)
	assert.EqualError(t, err, "the device is too small\ndelta: wants 32-wide heads")
	be, err = ParseBackend("test-bf16:delta=chunked")
	require.NoError(t, err)
	assert.EqualError(t, be.Supports(cfg), "the device is too small", "the swap took the picky kernel out")
	be, err = ParseBackend("chunked")
	require.NoError(t, err)
	assert.NoError(t, be.Supports(cfg))
	assert.Nil(t, be.Device, "a CPU backend has no device part")
	assert.False(t, be.Resident())
}

// CPUKernels says what internal/cpu chose, in its own words.
func TestCPUKernels(t *testing.T) {
	k := CPUKernels()
	assert.Equal(t, cpu.Describe(), k.Name)
	assert.Equal(t, "QWENREF_CPU", k.EnvVar)
	require.NotEmpty(t, k.Levels)
	assert.Equal(t, "portable", k.Levels[len(k.Levels)-1], "every CPU has the portable level")
	assert.Equal(t, cpu.Check(), k.Err)
}
