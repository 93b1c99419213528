package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validProbe is a well-formed probe: 5.17 on one GPU with every kernel missing.
func validProbe() Probe {
	f := false
	p := Probe{Schema: 1, Packages: map[string]Package{}, Warnings: []string{}}
	for _, n := range requiredPackages {
		p.Packages[n] = Package{}
	}
	p.CUDA = CUDAInfo{Available: true, DeviceCount: 1, Devices: []Device{{Name: "GPU", Capability: "9.0"}}}
	p.Transformers = Route{Scheme: SchemePerFunction, FastPath: &f}
	for _, k := range allKernels {
		p.Transformers.Kernels = append(p.Transformers.Kernels, Kernel{Name: k, Reason: "not installed"})
	}
	return p
}

func TestParseProbeValidates(t *testing.T) {
	good, err := json.Marshal(validProbe())
	require.NoError(t, err)
	_, err = ParseProbe(good)
	require.NoError(t, err)

	tr := true
	cases := []struct {
		name   string
		mutate func(p *Probe)
		want   string
	}{
		{"schema", func(p *Probe) { p.Schema = 2 }, "schema 2"},
		{"probe error", func(p *Probe) { p.Error = "probe failed: KeyError" }, "probe failed: KeyError"},
		{"package", func(p *Probe) { delete(p.Packages, "fla") }, `lacks "fla"`},
		{"device count", func(p *Probe) { p.CUDA.DeviceCount = 2 }, "device_count 2 but 1 devices"},
		{"capability", func(p *Probe) { p.CUDA.Devices[0].Capability = "sm90" }, "not MAJOR.MINOR"},
		{"scheme", func(p *Probe) { p.Transformers.Scheme = "magic" }, "unknown scheme"},
		{"verdict", func(p *Probe) { p.Transformers.FastPath = &tr }, "disagrees with its kernels"},
		{"no verdict", func(p *Probe) { p.Transformers.FastPath = nil }, "without kernels or a fast_path"},
		{"no kernels", func(p *Probe) { p.Transformers.Kernels = nil }, "without kernels or a fast_path"},
		{"reason", func(p *Probe) { p.Transformers.Kernels[0].Reason = "" }, "missing without a reason"},
		{"verdict without transformers", func(p *Probe) { p.Transformers.Scheme = SchemeNoTransformers }, "with a fast_path verdict"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := validProbe()
			c.mutate(&p)
			data, err := json.Marshal(p)
			require.NoError(t, err)
			_, err = ParseProbe(data)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	_, err = ParseProbe(bytes.Repeat([]byte(" "), maxProbeOutput+1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than")
	_, err = ParseProbe([]byte(`{"schema": 1, "packages": [1]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not the JSON a probe writes")
}

// ratioPattern matches a ratio as the docs write it (7.0 may be written 7).
func ratioPattern(r float64) string {
	s := regexp.QuoteMeta(strconv.FormatFloat(r, 'f', -1, 64))
	if !strings.Contains(s, ".") {
		s += `(\.0+)?`
	}
	return s + "×"
}

// The tables in the binary are the ones in the docs: each H200 row appears in docs/penalty.md
// as "a× / b× / …" and each CPU ratio as a bold figure.
func TestPenaltiesMatchTheDocs(t *testing.T) {
	doc := string(mustRead(t, "../docs/penalty.md"))
	for _, p := range H200Penalties {
		require.Len(t, p.Ratios, len(p.Seq), p.Level)
		assert.Equal(t, h200Date, p.Date)
		if p.Level == LevelDecode {
			assert.Contains(t, doc, "~1.0×")
			continue
		}
		var parts []string
		for _, r := range p.Ratios {
			parts = append(parts, ratioPattern(r))
		}
		assert.Regexp(t, strings.Join(parts, " / "), doc, p.Level)
	}
	for _, p := range CPUPenalties {
		require.Len(t, p.Ratios, len(p.Seq), p.Level)
		for _, r := range p.Ratios {
			assert.Regexp(t, `\*\*`+ratioPattern(r)+`\*\*`, doc, "%s: %v", p.Level, r)
		}
	}
}

func TestScaleModelPenalty(t *testing.T) {
	assert.Equal(t, 1.75, ScaleModelPenalty(1.75, 48, 64))
	assert.Equal(t, 1.0, ScaleModelPenalty(1.75, 0, 64))
	assert.InDelta(t, 1.375, ScaleModelPenalty(1.75, 24, 64), 1e-12)
	assert.InDelta(t, 1.75, ScaleModelPenalty(1.75, 18, 24), 1e-12, "the 3:1 layout of every Qwen3.5 size")
}

func TestFormatRatio(t *testing.T) {
	for in, want := range map[float64]string{7: "7.0", 2.3: "2.3", 1.75: "1.75", 18.8: "18.8", 104: "104", 35.1: "35.1"} {
		assert.Equal(t, want, FormatRatio(in))
	}
}

func TestAssessWithoutModelAndWithOtherLayouts(t *testing.T) {
	p := validProbe()
	r := Assess(&p, nil)
	assert.Equal(t, VerdictFallback, r.Verdict)
	assert.Zero(t, r.FallbackLayers)
	assert.NotContains(t, r.Summary, " of ")
	require.NotEmpty(t, r.Cost)
	assert.Contains(t, r.Cost[0], "about 1.7× slower")

	r = Assess(&p, &Layers{Config: "x", Total: 32, Linear: 16, Full: 16})
	assert.Contains(t, r.Summary, "16 of 32 layers")
	assert.Contains(t, r.Cost[0], "scaled to your 16 of 32")

	assert.NotContains(t, r.Advice[len(r.Advice)-1], "for this model")
	r = Assess(&p, &Layers{Config: "x", Total: 32, Linear: 16, Full: 16, QwenrefCUDA: "it runs op by op"})
	assert.Contains(t, r.Advice[len(r.Advice)-1], "qwenref run --backend cuda", "the reason follows the advice it qualifies")
	assert.Contains(t, r.Advice[len(r.Advice)-1], "; for this model: it runs op by op")

	r = Assess(&p, &Layers{Config: "x", Total: 8, Linear: 0, Full: 8})
	assert.Equal(t, VerdictNoLinear, r.Verdict)
	assert.Equal(t, ExitFastPath, r.ExitCode, "no linear layer: nothing falls back")
	assert.Empty(t, r.Cost)
}

// Whatever an interpreter writes, parsing and reporting return an error or a report, never a panic.
func FuzzParseProbe(f *testing.F) {
	good, err := json.Marshal(validProbe())
	require.NoError(f, err)
	f.Add(good)
	if rec, err := os.ReadFile(recordedH200); err == nil {
		f.Add(rec)
	}
	f.Add([]byte(`{"schema": 1, "packages": {}, "transformers": {"scheme": "fast-path-gate", "fast_path": true}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProbe(data)
		if err != nil {
			return
		}
		for _, l := range []*Layers{nil, {Total: 4, Linear: 3, Full: 1}, {Total: 2, Full: 2}} {
			var b bytes.Buffer
			require.NoError(t, Assess(p, l).WriteText(&b))
		}
	})
}

// Where torch is missing, the advice says to install it, whatever the verdict.
func TestAssessSaysInstallTorch(t *testing.T) {
	for _, scheme := range []string{SchemeNoTransformers, SchemeNoQwen35, SchemePerFunction} {
		p := validProbe()
		p.CUDA = CUDAInfo{}
		p.Transformers.Scheme = scheme
		r := Assess(&p, nil)
		assert.Contains(t, strings.Join(r.Advice, "\n"), "pip install torch", "scheme %s", scheme)
		p.Packages["torch"] = Package{Installed: true, Version: "2.11"}
		assert.NotContains(t, strings.Join(Assess(&p, nil).Advice, "\n"), "pip install torch", "scheme %s with torch", scheme)
	}
}
