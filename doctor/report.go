package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Exit statuses of `qwenref doctor`, for scripts and CI to gate on.
const (
	ExitFastPath = 0 // every GDN kernel transformers looks for is there and can run
	ExitFailed   = 1 // the probe could not run or decide, or the config could not be read
	ExitUsage    = 2 // bad command line
	ExitFallback = 4 // a finding: layers will fall back (or cannot run transformers' model at all)
)

// Verdicts of a report.
const (
	VerdictFastPath       = "fast-path"
	VerdictFallback       = "fallback"
	VerdictNoCUDA         = "no-cuda" // the kernels are there but torch sees no GPU to run them on
	VerdictNoTransformers = "no-transformers"
	VerdictNoQwen35       = "no-qwen3_5"
	VerdictUndecided      = "undecided"
	VerdictNoLinear       = "no-linear-layers" // the model has no GDN layer to fall back
)

// Report is doctor's finding for one probe and, optionally, one model.
type Report struct {
	Verdict        string    `json:"verdict"`
	ExitCode       int       `json:"exit_code"`
	Summary        string    `json:"summary"`
	Missing        []string  `json:"missing_kernels"`
	Model          *Layers   `json:"model,omitempty"`
	FallbackLayers int       `json:"fallback_layers"`
	Cost           []string  `json:"expected_cost,omitempty"`
	CostCaveat     string    `json:"expected_cost_caveat,omitempty"`
	Penalties      []Penalty `json:"penalties,omitempty"` // the measured table the cost comes from
	Advice         []string  `json:"advice"`
	Probe          *Probe    `json:"probe"`
}

// Assess turns a probe (and the model's layer counts, or nil) into a verdict, the expected
// cost and advice.
func Assess(p *Probe, layers *Layers) *Report {
	r := &Report{Probe: p, Model: layers, Missing: []string{}, Advice: []string{}}
	route := p.Transformers
	for _, k := range route.Kernels {
		if !k.Available {
			r.Missing = append(r.Missing, k.Name)
		}
	}
	switch {
	case route.Scheme == SchemeNoTransformers:
		r.Verdict, r.ExitCode = VerdictNoTransformers, ExitFallback
		r.Summary = "transformers is not installed in this environment: there is no fast path to take."
		r.Advice = append(r.Advice, "install transformers with Qwen3.5 support (qwenref is checked against 5.17): pip install transformers")
		r.Advice = append(r.Advice, torchAdvice(p)...)
		return r
	case route.Scheme == SchemeNoQwen35:
		r.Verdict, r.ExitCode = VerdictNoQwen35, ExitFallback
		r.Summary = fmt.Sprintf("transformers %s has no Qwen3.5 model (%s is missing): it cannot load the model at all.",
			p.Packages["transformers"].Version, route.ModelingFile)
		r.Advice = append(r.Advice, "upgrade transformers (qwenref is checked against 5.17): pip install -U transformers")
		r.Advice = append(r.Advice, torchAdvice(p)...)
		return r
	case route.Scheme == SchemeUnknown || route.FastPath == nil:
		r.Verdict, r.ExitCode = VerdictUndecided, ExitFailed
		r.Summary = fmt.Sprintf("could not tell how transformers %s picks its GDN kernels (%s has neither seam this doctor knows).",
			p.Packages["transformers"].Version, route.ModelingFile)
		return r
	case *route.FastPath && !p.CUDA.Available:
		r.Verdict, r.ExitCode = VerdictNoCUDA, ExitFallback
		r.Summary = "transformers will select the fused kernels, but torch sees no CUDA device to run them on: " +
			"a forward on CPU tensors will fail inside them."
		r.Advice = append(r.Advice, cudaAdvice(p)...)
		return r
	case *route.FastPath:
		r.Verdict, r.ExitCode = VerdictFastPath, ExitFastPath
		r.Summary = "fast path: transformers will use the fused kernels for every linear-attention layer."
		if layers != nil {
			r.Summary = fmt.Sprintf("fast path: all %d linear-attention layers of %d will use the fused kernels.",
				layers.Linear, layers.Total)
		}
		return r
	}
	if layers != nil && layers.Linear == 0 {
		r.Verdict, r.ExitCode = VerdictNoLinear, ExitFastPath
		r.Summary = fmt.Sprintf("%s has no linear-attention layer, so nothing falls back (transformers lacks %s).",
			layers.Config, strings.Join(r.Missing, ", "))
		return r
	}
	r.Verdict, r.ExitCode = VerdictFallback, ExitFallback
	r.Summary = fmt.Sprintf("fallback: transformers will run %s through its PyTorch reference code.",
		strings.Join(r.Missing, ", "))
	if layers != nil {
		r.FallbackLayers = layers.Linear
		r.Summary = fmt.Sprintf("fallback: %d of %d layers (every linear-attention layer) will run %s through "+
			"transformers' PyTorch reference code; the %d full-attention layers are unaffected.",
			layers.Linear, layers.Total, strings.Join(r.Missing, ", "), layers.Full)
	}
	total, linear := 0, 0
	if layers != nil {
		total, linear = layers.Total, layers.Linear
	}
	r.Cost = costLines(linear, total)
	if len(r.Missing) < len(route.Kernels) {
		r.Cost = append(r.Cost, "these figures are for all four kernels missing; with only "+
			strings.Join(r.Missing, ", ")+" missing expect less")
	}
	r.CostCaveat = costCaveat()
	r.Penalties = H200Penalties
	if !p.CUDA.Available {
		r.Advice = append(r.Advice, cudaAdvice(p)...)
	}
	r.Advice = append(r.Advice, kernelAdvice(p)...)
	r.Advice = append(r.Advice, qwenrefAdvice(layers))
	return r
}

func missingFrom(p *Probe, pkg string) []Kernel {
	var ks []Kernel
	for _, k := range p.Transformers.Kernels {
		if !k.Available && k.Package == pkg {
			ks = append(ks, k)
		}
	}
	return ks
}

// pip is the install command for the probed interpreter, so packages land where the job looks.
func pip(p *Probe) string {
	if p.Python.Executable == "" {
		return "pip install"
	}
	return p.Python.Executable + " -m pip install"
}

// Advice lines are a command or a sentence, then "\n" and why (indented when printed).
func kernelAdvice(p *Probe) []string {
	var out []string
	if ks := missingFrom(p, "fla"); len(ks) > 0 {
		fla := p.Packages["fla"]
		switch {
		case !fla.Installed:
			out = append(out, pip(p)+" flash-linear-attention\n"+
				"for chunk_gated_delta_rule and fused_recurrent_gated_delta_rule: Python with Triton kernels compiled at "+
				"first use, so no nvcc; it needs a CUDA GPU and a C compiler for Triton's launcher")
		case strings.HasPrefix(ks[0].Reason, "importing"):
			out = append(out, fmt.Sprintf("%s -U flash-linear-attention fla-core\nfla %s is installed but does not import "+
				"(%s); a C compiler (gcc) must be on PATH for Triton", pip(p), fla.Version, ks[0].Reason))
		default:
			out = append(out, fmt.Sprintf("%s -U flash-linear-attention\nfla %s lacks what transformers looks for (%s)",
				pip(p), fla.Version, ks[0].Reason))
		}
	}
	if ks := missingFrom(p, "causal_conv1d"); len(ks) > 0 {
		cc := p.Packages["causal_conv1d"]
		build := "its setup first fetches a prebuilt wheel from the project's GitHub releases when one matches your torch, " +
			"CUDA, Python and C++ ABI; without one (or without network) it compiles from source, which needs nvcc and CUDA_HOME"
		if p.CUDA.NVCC == "" {
			build += " (no nvcc found here"
			if p.CUDA.CUDAHome == "" {
				build += ", no CUDA_HOME"
			}
			build += ")"
		} else {
			build += fmt.Sprintf(" (nvcc here: %s, %s)", p.CUDA.NVCC, orUnknown(p.CUDA.NVCCVersion))
		}
		if !cc.Installed {
			out = append(out, pip(p)+" --no-build-isolation causal-conv1d\nfor causal_conv1d_fn and causal_conv1d_update: "+build)
		} else {
			out = append(out, fmt.Sprintf("%s --no-build-isolation -U causal-conv1d\ncausal_conv1d %s is installed but "+
				"unusable (%s); %s", pip(p), cc.Version, ks[0].Reason, build))
		}
	}
	var hubbed []string // missing kernels the hub route could supply
	if h := p.Transformers.Hub; h != nil {
		for _, k := range p.Transformers.Kernels {
			if !k.Available && slices.Contains(h.Mapped, k.Name) {
				hubbed = append(hubbed, k.Name)
			}
		}
	}
	if h := p.Transformers.Hub; len(hubbed) > 0 {
		want := "kernels"
		if h.MinVersion != "" && h.MaxVersion != "" {
			want = fmt.Sprintf("kernels>=%s,<%s", h.MinVersion, h.MaxVersion)
		}
		line := fmt.Sprintf("or, building nothing: %s '%s', then from_pretrained(..., use_kernels=True)\n"+
			"transformers then downloads hub kernels for %s at load time (needs network)", pip(p), want, strings.Join(hubbed, ", "))
		switch {
		case h.KernelsInstalled && !h.Accepted:
			line += fmt.Sprintf("; the installed kernels %s is outside that range, so transformers ignores it", h.KernelsVersion)
		case h.KernelsInstalled && !h.EnvEnabled:
			line += "; USE_HUB_KERNELS switches it off in this environment"
		}
		out = append(out, line)
	}
	return out
}

// installTorch is the advice when torch is missing: transformers runs no
// model without it.
const installTorch = "torch is not installed in this environment: transformers needs it to run any model; " +
	"install a CUDA build (pip install torch, or the command https://pytorch.org/get-started/locally/ gives for your CUDA)"

// torchAdvice is installTorch when torch is missing, else nothing.
func torchAdvice(p *Probe) []string {
	if !p.Packages["torch"].Installed {
		return []string{installTorch}
	}
	return nil
}

func cudaAdvice(p *Probe) []string {
	c := p.CUDA
	switch {
	case !p.Packages["torch"].Installed:
		return []string{installTorch}
	case c.Error != "":
		return []string{"torch could not report CUDA: " + c.Error}
	case c.TorchCUDA == "" && c.TorchHIP == "":
		return []string{fmt.Sprintf("torch %s is a CPU-only build: install a CUDA build of torch to use any GPU kernel",
			p.Packages["torch"].Version)}
	}
	return []string{fmt.Sprintf("torch %s (CUDA %s) sees no GPU: check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES",
		p.Packages["torch"].Version, c.TorchCUDA)}
}

func qwenrefAdvice(layers *Layers) string {
	a := "or run the model with qwenref's CUDA backend: qwenref run --backend cuda --model DIR\n" +
		"the qwenref binary (go install ./cmd/qwenref) carries prebuilt kernels for sm_80, sm_90, sm_100 and sm_120 (PTX for newer GPUs): it needs " +
		"an NVIDIA driver 580+ and cuBLAS 13 (torch's nvidia wheels provide it), no CUDA compiler (cuda/README.md)"
	if layers != nil && layers.QwenrefCUDA != "" {
		a += "; for this model: " + layers.QwenrefCUDA
	}
	return a
}

// FailureJSON is what `qwenref doctor --json` prints when the probe
// could not run or the config could not be read: verdict "failed", the
// exit code and the error.
func FailureJSON(err error) []byte {
	b, _ := json.MarshalIndent(map[string]any{"verdict": "failed", "exit_code": ExitFailed, "error": err.Error()}, "", "  ")
	return b
}

// WriteText prints the report for a person.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	p := r.Probe
	fmt.Fprintf(&b, "qwenref doctor: will transformers' Qwen3.5/3.6 linear-attention layers take their fast path?\n\n")
	py := p.Python
	fmt.Fprintf(&b, "python         %s %s (virtualenv: %s, user site-packages: %s)\n", py.Executable, py.Version,
		yesNo(py.Virtualenv), onOff(py.UserSiteEnabled))
	if py.PythonPath != "" {
		fmt.Fprintf(&b, "PYTHONPATH     %s\n", py.PythonPath)
	}
	for _, name := range []string{"torch", "transformers", "fla", "causal_conv1d", "kernels", "triton"} {
		pkg := p.Packages[name]
		v := "not installed"
		if pkg.Installed {
			v = orUnknown(pkg.Version)
			if name == "torch" && p.CUDA.TorchCUDA != "" {
				v += " (CUDA " + p.CUDA.TorchCUDA + ")"
			}
		}
		fmt.Fprintf(&b, "%-14s %s\n", name, v)
	}
	c := p.CUDA
	switch {
	case c.Available:
		var devs []string
		for _, d := range c.Devices {
			devs = append(devs, fmt.Sprintf("%s (compute capability %s)", d.Name, d.Capability))
		}
		fmt.Fprintf(&b, "CUDA           %s; torch built for %s\n", strings.Join(devs, ", "), strings.Join(c.ArchList, " "))
	case c.Error != "":
		fmt.Fprintf(&b, "CUDA           unknown: %s\n", c.Error)
	default:
		fmt.Fprintf(&b, "CUDA           not available to torch\n")
	}
	nvcc := "not found"
	if c.NVCC != "" {
		nvcc = c.NVCC + " (" + orUnknown(c.NVCCVersion) + ")"
	}
	home := "not set"
	if c.CUDAHomeEnv != "" {
		home = c.CUDAHomeEnv
	} else if c.CUDAHome != "" {
		home = "not set (found " + c.CUDAHome + ")"
	}
	fmt.Fprintf(&b, "nvcc           %s; CUDA_HOME %s\n", nvcc, home)

	if len(p.Transformers.Kernels) > 0 {
		fmt.Fprintf(&b, "\nkernels transformers looks for (%s, %s):\n", p.Transformers.Scheme, p.Transformers.ModelingFile)
		for _, k := range p.Transformers.Kernels {
			if k.Available {
				fmt.Fprintf(&b, "  %-34s fused: %s\n", k.Name, k.Resolved)
			} else {
				fmt.Fprintf(&b, "  %-34s PyTorch fallback: %s\n", k.Name, k.Reason)
			}
		}
	}
	if r.Model != nil {
		fmt.Fprintf(&b, "\nmodel          %s: %d layers, %d linear attention (GDN), %d full attention\n",
			r.Model.Config, r.Model.Total, r.Model.Linear, r.Model.Full)
	}
	for _, wn := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	fmt.Fprintf(&b, "\n%s\n", r.Summary)
	if len(r.Cost) > 0 {
		fmt.Fprintf(&b, "\nexpected cost:\n")
		for _, l := range r.Cost {
			fmt.Fprintf(&b, "  %s\n", l)
		}
		fmt.Fprintf(&b, "  (%s)\n", r.CostCaveat)
	}
	if len(r.Advice) > 0 {
		fmt.Fprintf(&b, "\nwhat to do:\n")
		for _, l := range r.Advice {
			fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(l, "\n", "\n      "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}
