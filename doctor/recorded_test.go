package doctor

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordedH200 is the probe's output on the GPU machine: transformers 5.17.0 and torch 2.11 on an
// H200, with neither fla nor causal-conv1d installed (testdata/gen/gen_doctor_h200.py).
const recordedH200 = "../testdata/doctor/h200-transformers-5.17.json"

func TestRecordedH200ReportsTheFallback(t *testing.T) {
	data, err := os.ReadFile(recordedH200)
	require.NoError(t, err, "the recorded GPU-machine output is part of the tests")
	p, err := ParseProbe(data)
	require.NoError(t, err)

	assert.Equal(t, "5.17.0", p.Packages["transformers"].Version)
	assert.True(t, strings.HasPrefix(p.Packages["torch"].Version, "2.11"), p.Packages["torch"].Version)
	assert.False(t, p.Packages["fla"].Installed)
	assert.False(t, p.Packages["causal_conv1d"].Installed)
	require.True(t, p.CUDA.Available)
	require.NotEmpty(t, p.CUDA.Devices)
	assert.Contains(t, p.CUDA.Devices[0].Name, "H200")
	assert.Equal(t, "9.0", p.CUDA.Devices[0].Capability)
	assert.Equal(t, SchemePerFunction, p.Transformers.Scheme)
	require.NotNil(t, p.Transformers.FastPath)
	assert.False(t, *p.Transformers.FastPath)

	layers := layers27B(t)
	require.NotNil(t, p.Model, "recorded with --model-config")
	assert.Equal(t, ProbeModel{Config: p.Model.Config, Layers: layers.Total, Linear: layers.Linear, Full: layers.Full}, *p.Model,
		"the probe's own count agrees with model.LoadConfig's")

	r := Assess(p, layers)
	assert.Equal(t, VerdictFallback, r.Verdict)
	assert.Equal(t, ExitFallback, r.ExitCode)
	assert.ElementsMatch(t, allKernels, r.Missing)
	assert.Equal(t, 48, r.FallbackLayers)
	assert.Equal(t, 64, layers.Total)
	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	out := text.String()
	assert.Contains(t, out, "48 of 64 layers")
	model, _ := FindPenalty(H200Penalties, LevelModel)
	layer, _ := FindPenalty(H200Penalties, LevelLayer)
	assert.Contains(t, out, model.Span())
	assert.Contains(t, out, layer.Span())
	assert.Contains(t, out, "pip install flash-linear-attention")
	assert.Regexp(t, `-m pip install --no-build-isolation causal-conv1d\n`, out)
	assert.Contains(t, out, "--backend cuda")
}
