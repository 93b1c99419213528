package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeInterpreter writes a sh script that stands in for python: it copies a recorded probe
// output to the probe's --out, so the recording goes through the whole command.
func fakeInterpreter(t *testing.T, recorded string) string {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	abs, err := filepath.Abs(recorded)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = --out ]; then cp '" + abs + "' \"$2\"; fi; shift; done\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

func TestDoctorRecordedH200(t *testing.T) {
	py := fakeInterpreter(t, "../../testdata/doctor/h200-transformers-5.17.json")
	code, stdout, stderr := runCLI("doctor", "--python", py, "--model", config27B)
	require.Equal(t, 4, code, stderr)
	assert.Empty(t, stderr)
	assert.Contains(t, stdout, "48 of 64 layers")
	for _, k := range []string{"causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"} {
		assert.Regexp(t, `(?m)^  `+k+` +PyTorch fallback: `, stdout)
	}
	assert.Contains(t, stdout, "expected cost:")

	code, stdout, stderr = runCLI("doctor", "--python", py, "--model", config27B, "--json")
	require.Equal(t, 4, code, stderr)
	var r struct {
		Verdict        string   `json:"verdict"`
		ExitCode       int      `json:"exit_code"`
		Missing        []string `json:"missing_kernels"`
		FallbackLayers int      `json:"fallback_layers"`
		Model          struct{ Layers, Linear, Full int }
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	assert.Equal(t, "fallback", r.Verdict)
	assert.Equal(t, 4, r.ExitCode)
	assert.Len(t, r.Missing, 4)
	assert.Equal(t, 48, r.FallbackLayers)
	assert.Equal(t, 64, r.Model.Layers)
	assert.Equal(t, 16, r.Model.Full)
}
