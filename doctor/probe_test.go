package doctor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const stubRoot = "../testdata/doctor/stubs"

var bare struct {
	once sync.Once
	why  string
}

// needBarePython skips unless python3 exists and has none of the packages the stubs stand
// in for (a real torch or fla would shadow nothing but would add to what the probe finds).
func needBarePython(t *testing.T) {
	t.Helper()
	bare.once.Do(func() {
		if _, err := exec.LookPath("python3"); err != nil {
			bare.why = "no python3 on PATH"
			return
		}
		t.Setenv("PYTHONPATH", "")
		p, err := Run(context.Background(), Options{Timeout: time.Minute})
		if err != nil {
			bare.why = "python3 cannot run the probe: " + err.Error()
			return
		}
		for _, name := range []string{"torch", "transformers", "fla", "causal_conv1d", "kernels"} {
			if p.Packages[name].Installed {
				bare.why = "python3 here has a real " + name + "; the stub tests need an interpreter without it"
				return
			}
		}
	})
	if bare.why != "" {
		t.Skip(bare.why)
	}
}

// stubs puts the named stub site-packages trees on PYTHONPATH, in order.
func stubs(t *testing.T, names ...string) {
	t.Helper()
	var dirs []string
	for _, n := range names {
		d, err := filepath.Abs(filepath.Join(stubRoot, n))
		require.NoError(t, err)
		require.DirExists(t, d)
		dirs = append(dirs, d)
	}
	t.Setenv("PYTHONPATH", strings.Join(dirs, string(os.PathListSeparator)))
}

func runStub(t *testing.T, names ...string) *Probe {
	t.Helper()
	needBarePython(t)
	stubs(t, names...)
	p, err := Run(context.Background(), Options{Timeout: time.Minute})
	require.NoError(t, err)
	return p
}

func kernelByName(t *testing.T, p *Probe, name string) Kernel {
	t.Helper()
	for _, k := range p.Transformers.Kernels {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("probe has no kernel %s: %+v", name, p.Transformers.Kernels)
	return Kernel{}
}

func layers27B(t *testing.T) *Layers {
	t.Helper()
	l, err := LayersFromConfig("../testdata/configs/qwen3.5-27b.json")
	require.NoError(t, err)
	return l
}

var allKernels = []string{"causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"}

func TestProbeStubEnvironments(t *testing.T) {
	cases := []struct {
		name    string
		trees   []string
		scheme  string
		missing []string
		verdict string
		exit    int
		reason  string // in every missing kernel's reason
	}{
		{"fast path 5.17", []string{"torch-cuda", "transformers-5.17", "fla", "causal-conv1d"},
			SchemePerFunction, nil, VerdictFastPath, ExitFastPath, ""},
		{"no fla", []string{"torch-cuda", "transformers-5.17", "causal-conv1d"},
			SchemePerFunction, []string{"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"}, VerdictFallback, ExitFallback,
			"package fla is not installed"},
		{"no causal-conv1d", []string{"torch-cuda", "transformers-5.17", "fla"},
			SchemePerFunction, []string{"causal_conv1d_fn", "causal_conv1d_update"}, VerdictFallback, ExitFallback,
			"package causal_conv1d is not installed"},
		{"fla without the recurrent kernel", []string{"torch-cuda", "transformers-5.17", "fla-chunk-only", "causal-conv1d"},
			SchemePerFunction, []string{"fused_recurrent_gated_delta_rule"}, VerdictFallback, ExitFallback,
			"fla has no ops.gated_delta_rule.fused_recurrent_gated_delta_rule"},
		{"causal-conv1d without update", []string{"torch-cuda", "transformers-5.17", "fla", "causal-conv1d-no-update"},
			SchemePerFunction, []string{"causal_conv1d_update"}, VerdictFallback, ExitFallback,
			"causal_conv1d has no causal_conv1d_update"},
		{"fla that does not import", []string{"torch-cuda", "transformers-5.17", "fla-broken", "causal-conv1d"},
			SchemePerFunction, []string{"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"}, VerdictFallback, ExitFallback,
			"importing fla failed: RuntimeError: Failed to find C compiler"},
		{"nothing installed but torch and transformers", []string{"torch-cuda", "transformers-5.17"},
			SchemePerFunction, allKernels, VerdictFallback, ExitFallback, "is not installed"},
		{"5.17 without CUDA selects the kernels anyway", []string{"torch-cpu", "transformers-5.17", "fla", "causal-conv1d"},
			SchemePerFunction, nil, VerdictNoCUDA, ExitFallback, ""},
		{"fast path 5.3 gate", []string{"torch-cuda", "transformers-5.3", "fla", "causal-conv1d"},
			SchemeFastPathGate, nil, VerdictFastPath, ExitFastPath, ""},
		{"5.3 gate without CUDA", []string{"torch-cpu", "transformers-5.3", "fla", "causal-conv1d"},
			SchemeFastPathGate, allKernels, VerdictFallback, ExitFallback, "needs CUDA and torch sees none"},
		{"5.3 gate without fla", []string{"torch-cuda", "transformers-5.3", "causal-conv1d"},
			SchemeFastPathGate, []string{"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"}, VerdictFallback, ExitFallback,
			"package fla is not installed"},
		{"no transformers", []string{"torch-cuda"}, SchemeNoTransformers, nil, VerdictNoTransformers, ExitFallback, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := runStub(t, c.trees...)
			assert.Equal(t, c.scheme, p.Transformers.Scheme)
			r := Assess(p, layers27B(t))
			assert.Equal(t, c.verdict, r.Verdict, r.Summary)
			assert.Equal(t, c.exit, r.ExitCode)
			assert.ElementsMatch(t, c.missing, r.Missing)
			for _, name := range c.missing {
				assert.Contains(t, kernelByName(t, p, name).Reason, c.reason)
			}
			if c.verdict == VerdictFallback {
				assert.Equal(t, 48, r.FallbackLayers)
				assert.Contains(t, r.Summary, "48 of 64 layers")
				assert.NotEmpty(t, r.Cost)
			}
		})
	}
}

func TestProbeFindsWhatTransformersWouldCall(t *testing.T) {
	p := runStub(t, "torch-cuda", "transformers-5.17", "fla", "causal-conv1d")
	assert.Equal(t, "fla.ops.gated_delta_rule.chunk_gated_delta_rule", kernelByName(t, p, "chunk_gated_delta_rule").Resolved)
	assert.Equal(t, "causal_conv1d.causal_conv1d_update", kernelByName(t, p, "causal_conv1d_update").Resolved)
	assert.Equal(t, "torch_recurrent_gated_delta_rule", kernelByName(t, p, "fused_recurrent_gated_delta_rule").TorchFunction)
	assert.Equal(t, "5.17.0", p.Packages["transformers"].Version)
	assert.Equal(t, "0.5.2", p.Packages["fla"].Version)
	assert.Equal(t, "2.11.0+cu130", p.Packages["torch"].Version)
	require.Len(t, p.CUDA.Devices, 1)
	assert.Equal(t, Device{Name: "NVIDIA H200", Capability: "9.0"}, p.CUDA.Devices[0])
	assert.Contains(t, p.CUDA.ArchList, "sm_90")
	assert.Contains(t, p.Python.PythonPath, "transformers-5.17")
	require.NotNil(t, p.Transformers.Hub)
	assert.False(t, p.Transformers.Hub.KernelsInstalled)
	assert.Equal(t, "0.17.0", p.Transformers.Hub.MinVersion)
	assert.ElementsMatch(t, allKernels, p.Transformers.Hub.Mapped)
}

func TestProbeHubKernelsRoute(t *testing.T) {
	p := runStub(t, "torch-cuda", "transformers-5.17", "kernels")
	h := p.Transformers.Hub
	require.NotNil(t, h)
	assert.True(t, h.KernelsInstalled)
	assert.Equal(t, "0.17.1", h.KernelsVersion)
	assert.True(t, h.Accepted, "0.17.1 is inside [0.17.0, 0.18.0)")
	r := Assess(p, nil)
	assert.Equal(t, VerdictFallback, r.Verdict, "use_kernels=True is opt-in: a default load still falls back")
	assert.Contains(t, strings.Join(r.Advice, "\n"), "use_kernels=True")

	t.Setenv("USE_HUB_KERNELS", "no")
	p, err := Run(context.Background(), Options{Timeout: time.Minute})
	require.NoError(t, err)
	assert.False(t, p.Transformers.Hub.EnvEnabled)
}

func TestProbeNoCUDAAdvice(t *testing.T) {
	p := runStub(t, "torch-cpu", "transformers-5.17", "fla", "causal-conv1d")
	assert.False(t, p.CUDA.Available)
	assert.Contains(t, strings.Join(p.Warnings, "\n"), "torch sees no CUDA device")
	r := Assess(p, nil)
	assert.Contains(t, strings.Join(r.Advice, "\n"), "CPU-only build")
}

func TestRunNoPython(t *testing.T) {
	_, err := Run(context.Background(), Options{Python: filepath.Join(t.TempDir(), "no-such-python")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--python ")
	assert.Contains(t, err.Error(), "no-such-python")
}

func TestRunTimesOut(t *testing.T) {
	needBarePython(t)
	stubs(t, "torch-hang", "transformers-5.17")
	start := time.Now()
	_, err := Run(context.Background(), Options{Timeout: 2 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not finish within 2s")
	assert.Less(t, time.Since(start), 20*time.Second)
}

// fakePython writes an executable script that stands in for an interpreter.
func fakePython(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "python")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

// writeOut is a sh loop that finds the probe's --out argument.
const writeOut = `while [ $# -gt 0 ]; do if [ "$1" = --out ]; then out="$2"; fi; shift; done
`

func TestRunRejectsBadOutput(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	cases := []struct{ name, body, want string }{
		{"invalid JSON", writeOut + `echo 'not json' > "$out"`, "not the JSON a probe writes"},
		{"another schema", writeOut + `echo '{"schema": 2}' > "$out"`, "schema 2"},
		{"probe's own failure", writeOut + `echo '{"schema": 1, "error": "probe failed: boom"}' > "$out"`, "probe failed: boom"},
		{"no result", `echo 'Traceback: something broke' >&2`, "wrote no result"},
		// A FIFO left where the result goes: refused at once (a plain open waited forever).
		{"a FIFO as the result", writeOut + `mkfifo "$out"`, "FIFO"},
		{"non-zero exit", `echo 'ImportError: bad site' >&2; exit 3`, "ImportError: bad site"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(context.Background(), Options{Python: fakePython(t, c.body), Timeout: 30 * time.Second})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestProbeRunsStandalone(t *testing.T) {
	needBarePython(t)
	stubs(t, "torch-cuda", "transformers-5.17")
	out, err := exec.Command("python3", "-B", "probe.py", "--model-config", "../testdata/configs/qwen3.5-27b.json").Output()
	require.NoError(t, err)
	p, err := ParseProbe(out)
	require.NoError(t, err)
	require.NotNil(t, p.Model)
	l := layers27B(t)
	assert.Equal(t, ProbeModel{Config: "../testdata/configs/qwen3.5-27b.json", Layers: l.Total, Linear: l.Linear, Full: l.Full}, *p.Model)
	assert.Equal(t, ProbeSource(), mustRead(t, "probe.py"))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// copyTree copies a stub tree's contents into dst (for a venv or a user site-packages).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
}

func TestProbeHonoursVirtualenvAndUserSite(t *testing.T) {
	needBarePython(t)
	stubs(t, "torch-cuda", "transformers-5.17")
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command("python3", "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv: %v: %s", err, out)
	}
	site, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c",
		"import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	require.NoError(t, err)
	copyTree(t, filepath.Join(stubRoot, "fla"), strings.TrimSpace(string(site)))

	p, err := Run(context.Background(), Options{Python: filepath.Join(venv, "bin", "python"), Timeout: time.Minute})
	require.NoError(t, err)
	assert.True(t, p.Python.Virtualenv)
	assert.True(t, kernelByName(t, p, "chunk_gated_delta_rule").Available, "fla in the venv's site-packages")
	assert.False(t, kernelByName(t, p, "causal_conv1d_fn").Available)

	// causal_conv1d in a user site-packages: found by the plain interpreter, as a job would find it.
	userBase := t.TempDir()
	t.Setenv("PYTHONUSERBASE", userBase)
	userSite, err := exec.Command("python3", "-c", "import site; print(site.getusersitepackages())").Output()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(strings.TrimSpace(string(userSite)), userBase))
	copyTree(t, filepath.Join(stubRoot, "causal-conv1d"), strings.TrimSpace(string(userSite)))
	p, err = Run(context.Background(), Options{Timeout: time.Minute})
	require.NoError(t, err)
	assert.True(t, kernelByName(t, p, "causal_conv1d_fn").Available, "causal_conv1d in the user site-packages")
	assert.True(t, p.Python.UserSiteEnabled)

	t.Setenv("PYTHONNOUSERSITE", "1")
	p, err = Run(context.Background(), Options{Timeout: time.Minute})
	require.NoError(t, err)
	assert.False(t, kernelByName(t, p, "causal_conv1d_fn").Available, "PYTHONNOUSERSITE is the user's to set")
}

func TestProbeOnEachInterpreter(t *testing.T) {
	needBarePython(t)
	stubs(t, "torch-cuda", "transformers-5.17", "causal-conv1d")
	seen := map[string]bool{}
	for _, name := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		real, _ := filepath.EvalSymlinks(path)
		if seen[real] {
			continue
		}
		seen[real] = true
		t.Run(path, func(t *testing.T) {
			p, err := Run(context.Background(), Options{Python: path, Timeout: time.Minute})
			require.NoError(t, err)
			r := Assess(p, layers27B(t))
			assert.Equal(t, VerdictFallback, r.Verdict)
			assert.ElementsMatch(t, []string{"chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"}, r.Missing)
		})
	}
}
