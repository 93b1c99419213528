// Package doctor tells a PyTorch user whether transformers' Qwen3.5/3.6 linear-attention
// (Gated DeltaNet) layers will take their fast path in their Python environment, how many
// layers of a model fall back when they do not, what that costs by qwenref's own
// measurements, and what would fix it.
//
// The environment is read by probe.py, embedded here and run with the user's interpreter;
// this file runs it and validates its JSON. report.go turns a probe into a verdict and advice,
// penalty.go holds the measured figures.
package doctor

import (
	"bytes"
	"context"
	_ "embed" // probe.py
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"

	"github.com/qwenref/qwenref/internal/safeio"
)

//go:embed probe.py
var probeSource []byte

// ProbeSource returns the Python probe the binary runs (a standalone script: see its docstring).
func ProbeSource() []byte { return bytes.Clone(probeSource) }

// DefaultTimeout bounds one probe run: importing torch and initialising CUDA, then fla with
// Triton, can take tens of seconds on a cold disk.
const DefaultTimeout = 2 * time.Minute

// maxProbeOutput caps the probe's JSON (a real one is a few KiB).
const maxProbeOutput = 4 << 20

// stderrTail is how much of the probe's stderr an error quotes.
const stderrTail = 4 << 10

// Options says how to run the probe.
type Options struct {
	Python  string        // interpreter name or path; "" means python3 on PATH
	Timeout time.Duration // 0 means DefaultTimeout
}

// Probe is the probe's JSON report (schema 1).
type Probe struct {
	Schema       int                `json:"schema"`
	Error        string             `json:"error"`
	Python       PythonInfo         `json:"python"`
	Packages     map[string]Package `json:"packages"`
	CUDA         CUDAInfo           `json:"cuda"`
	Transformers Route              `json:"transformers"`
	Model        *ProbeModel        `json:"model,omitempty"`
	Warnings     []string           `json:"warnings"`
}

// PythonInfo describes the interpreter the probe ran in.
type PythonInfo struct {
	Executable      string `json:"executable"`
	Version         string `json:"version"`
	Prefix          string `json:"prefix"`
	Virtualenv      bool   `json:"virtualenv"`
	UserSite        string `json:"user_site"`
	UserSiteEnabled bool   `json:"user_site_enabled"`
	PythonPath      string `json:"pythonpath"`
}

// Package is one import name as the interpreter finds it (version from its distribution).
type Package struct {
	Installed     bool              `json:"installed"`
	Version       string            `json:"version"`
	Distribution  string            `json:"distribution"`
	Location      string            `json:"location"`
	Distributions map[string]string `json:"distributions,omitempty"`
}

// CUDAInfo is what torch reports about CUDA, and where nvcc and CUDA_HOME are.
type CUDAInfo struct {
	TorchImported  bool     `json:"torch_imported"`
	TorchCUDA      string   `json:"torch_cuda"`
	TorchHIP       string   `json:"torch_hip"`
	Available      bool     `json:"available"`
	DeviceCount    int      `json:"device_count"`
	Devices        []Device `json:"devices"`
	ArchList       []string `json:"arch_list"`
	Error          string   `json:"error"`
	NVCC           string   `json:"nvcc"`
	NVCCVersion    string   `json:"nvcc_version"`
	CUDAHomeEnv    string   `json:"cuda_home_env"`
	CUDAHome       string   `json:"cuda_home"`
	CUDAHomeExists bool     `json:"cuda_home_exists"`
}

// Device is one CUDA device.
type Device struct {
	Name       string `json:"name"`
	Capability string `json:"capability"` // "9.0"
}

// Route is how the installed transformers picks the GDN kernels, and what it picks.
type Route struct {
	Scheme       string   `json:"scheme"` // one of the Scheme* constants
	ModelingFile string   `json:"modeling_file"`
	Kernels      []Kernel `json:"kernels"`
	FastPath     *bool    `json:"fast_path"` // nil when there is nothing to decide
	Hub          *Hub     `json:"hub"`
}

// The schemes a probe reports.
const (
	SchemePerFunction    = "per-function-fallback" // 5.17: use_kernel_func_from_hub_with_fallback per function
	SchemeFastPathGate   = "fast-path-gate"        // up to 5.3: is_fast_path_available over four imports
	SchemeNoTransformers = "no-transformers"
	SchemeNoQwen35       = "no-qwen3_5" // transformers too old for the model
	SchemeUnknown        = "unknown"    // neither seam found in modeling_qwen3_5.py
)

// Kernel is one function transformers looks for, and whether it found it.
type Kernel struct {
	Name          string `json:"name"`
	Package       string `json:"package"`
	Lookup        string `json:"lookup"`
	TorchFunction string `json:"torch_function"`
	Available     bool   `json:"available"`
	Resolved      string `json:"resolved"`
	Reason        string `json:"reason"`
}

// Hub is the Hugging Face hub-kernel route (from_pretrained(..., use_kernels=True)).
type Hub struct {
	KernelsInstalled bool     `json:"kernels_installed"`
	KernelsVersion   string   `json:"kernels_version"`
	MinVersion       string   `json:"min_version"`
	MaxVersion       string   `json:"max_version"`
	Accepted         bool     `json:"accepted"`    // the installed kernels is in transformers' range
	EnvEnabled       bool     `json:"env_enabled"` // USE_HUB_KERNELS is not switched off
	Mapped           []string `json:"mapped"`      // GDN kernels transformers maps to a hub repository
}

// ProbeModel is the probe's own layer count, present when it ran with --model-config.
type ProbeModel struct {
	Config string `json:"config"`
	Layers int    `json:"layers"`
	Linear int    `json:"linear"`
	Full   int    `json:"full"`
	Error  string `json:"error"`
}

// requiredPackages are the import names every probe reports.
var requiredPackages = []string{"torch", "transformers", "fla", "causal_conv1d", "kernels", "triton"}

var capabilityRE = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

// ParseProbe decodes and validates a probe's JSON. A probe that reported its own failure
// is an error too.
func ParseProbe(data []byte) (*Probe, error) {
	if len(data) > maxProbeOutput {
		return nil, fmt.Errorf("probe output is %d bytes, more than the %d a probe writes", len(data), maxProbeOutput)
	}
	var p Probe
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("probe output is not the JSON a probe writes: %w", err)
	}
	if p.Schema != 1 {
		return nil, fmt.Errorf("probe output has schema %d, want 1", p.Schema)
	}
	if p.Error != "" {
		return nil, fmt.Errorf("probe: %s", p.Error)
	}
	for _, name := range requiredPackages {
		if _, ok := p.Packages[name]; !ok {
			return nil, fmt.Errorf("probe output: packages lacks %q", name)
		}
	}
	if p.CUDA.DeviceCount != len(p.CUDA.Devices) {
		return nil, fmt.Errorf("probe output: device_count %d but %d devices", p.CUDA.DeviceCount, len(p.CUDA.Devices))
	}
	for i, d := range p.CUDA.Devices {
		if !capabilityRE.MatchString(d.Capability) {
			return nil, fmt.Errorf("probe output: devices[%d].capability %q is not MAJOR.MINOR", i, d.Capability)
		}
	}
	return &p, p.Transformers.validate()
}

func (r *Route) validate() error {
	switch r.Scheme {
	case SchemePerFunction, SchemeFastPathGate:
	case SchemeNoTransformers, SchemeNoQwen35, SchemeUnknown:
		if r.FastPath != nil {
			return fmt.Errorf("probe output: scheme %s with a fast_path verdict", r.Scheme)
		}
		return nil
	default:
		return fmt.Errorf("probe output: unknown scheme %q", r.Scheme)
	}
	if len(r.Kernels) == 0 || r.FastPath == nil {
		return fmt.Errorf("probe output: scheme %s without kernels or a fast_path verdict", r.Scheme)
	}
	all := true
	for i, k := range r.Kernels {
		if k.Name == "" {
			return fmt.Errorf("probe output: kernels[%d] has no name", i)
		}
		if !k.Available && k.Reason == "" {
			return fmt.Errorf("probe output: kernel %s is missing without a reason", k.Name)
		}
		all = all && k.Available
	}
	if all != *r.FastPath {
		return fmt.Errorf("probe output: fast_path %v disagrees with its kernels", *r.FastPath)
	}
	return nil
}

// Run writes the probe to a temporary directory and runs it with the user's interpreter as
// their jobs run it: inherited environment (PYTHONPATH, virtualenv, user site-packages),
// current directory, -B so nothing is compiled to bytecode. It is killed after the timeout.
func Run(ctx context.Context, opt Options) (*Probe, error) {
	python, err := findPython(opt.Python)
	if err != nil {
		return nil, err
	}
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dir, err := os.MkdirTemp("", "qwenref-doctor-")
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	untrack := safeio.TrackTemp(dir) // removed on SIGINT, SIGTERM and SIGHUP too
	defer func() {
		_ = os.RemoveAll(dir)
		untrack()
	}()
	script := filepath.Join(dir, "probe.py")
	if err := os.WriteFile(script, probeSource, 0o600); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	out := filepath.Join(dir, "result.json")

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-B", script, "--out", out)
	var stderr tailBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.WaitDelay = 2 * time.Second // a child that keeps the pipes open cannot hold us
	runErr := cmd.Run()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return nil, fmt.Errorf("probe (%s) did not finish within %s and was stopped%s", python, timeout, stderr.quote())
	case runErr != nil:
		return nil, fmt.Errorf("probe (%s) failed: %v%s", python, runErr, stderr.quote())
	}
	// Opened without blocking: an interpreter (or its sitecustomize) could
	// leave a FIFO there, and a plain open would wait on it forever.
	data, err := safeio.ReadCapped(out, maxProbeOutput, "the probe's result")
	if err != nil {
		return nil, fmt.Errorf("probe (%s) wrote no result: %v%s", python, err, stderr.quote())
	}
	p, err := ParseProbe(data)
	if err != nil {
		return nil, fmt.Errorf("%v (interpreter %s)", err, python)
	}
	return p, nil
}

func findPython(name string) (string, error) {
	if name == "" {
		path, err := exec.LookPath("python3")
		if err != nil {
			return "", errors.New("no python3 on PATH: name the interpreter your jobs use with --python")
		}
		return path, nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("--python %s: %w", name, err)
	}
	return path, nil
}

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > stderrTail {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) quote() string {
	s := bytes.TrimSpace(t.b)
	if len(s) == 0 {
		return ""
	}
	return "; its output ends:\n" + string(s)
}
