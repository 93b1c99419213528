package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/plugin"
	"github.com/qwenref/qwenref/verify"
)

func init() {
	register(&command{name: "check", summary: "run a backend's kernel on a golden file's inputs and compare with its outputs and tolerances", run: runCheck})
}

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", "GOLDEN.safetensors [--backend B] [--plugin NAME=LIB.so]", `
Runs one backend's kernel for the file's op (gdn-core: the delta part,
conv: conv, attention: attn; the layer ops run qwenref's layer on every
part of the backend) on the inputs of a file 'qwenref golden' wrote, and compares every output (out or y, and final_state) with the
expected one, within the tolerances the file records. Exit status: 0
every output agrees, 4 one differs (named), 1 the file cannot be read or
holds no tolerances, 2 a usage error.

--grad checks a gradient golden ('qwenref golden --grad'): every input's
gradient, from qwenref's float32 backward or one --plugin's backward
entry points (qwenref_conv_backward, ...).

Your own kernel: build a shared library against plugin/qwenref_plugin.h
and name it with --plugin (docs/kernel-engineers.md).

Examples:
  qwenref golden --op gdn-core --dtype bf16 --seqlens 37,300,1 --out packed.safetensors
  qwenref check packed.safetensors --backend chunked
  qwenref check packed.safetensors --plugin mine=./libmine.so --backend chunked:delta=mine
  qwenref check gdn-grad.safetensors --grad
  qwenref check conv-grad.safetensors --grad --plugin mine=./libmine.so`, stderr)
	grad := fs.Bool("grad", false, "check the gradients of a 'qwenref golden --grad' file: the built-in float32 backward, or the one --plugin's")
	asJSON := fs.Bool("json", false, "print the checks as one JSON object (file, op, dtype, backend, outputs with their errors and bars, ok)")
	backend := addBackendFlag(fs)
	plugins := addPluginFlag(fs)
	// The file comes first or last.
	file, err := parseWithPositional(fs, args)
	if err != nil {
		return err
	}
	if file == "" {
		return usageError(fs, stderr, "give the golden file: qwenref check GOLDEN.safetensors")
	}
	if err := loadPlugins(plugins); err != nil {
		return err
	}
	g, err := verify.OpenGolden(file)
	if err != nil {
		return err
	}
	defer g.Close()
	be, err := model.ParseBackend(*backend)
	if err != nil {
		return err
	}
	defer be.Close()
	var bw verify.Backward = verify.NaiveBackward{}
	if *grad && len(*plugins) > 0 {
		if bw, err = plugin.BackwardOfFlags(*plugins); err != nil {
			return err
		}
	}
	got, err := g.Run(be)
	if err == nil && *grad {
		var gr []verify.Output
		gr, err = g.RunGrad(bw)
		got = append(got, gr...)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	type outJSON struct {
		Name      string  `json:"name"`
		RelL2     float64 `json:"rel_l2"`
		RelL2Tol  float64 `json:"rel_l2_tol"`
		MaxAbs    float64 `json:"max_abs_scaled"`
		MaxAbsTol float64 `json:"max_abs_scaled_tol"`
		OK        bool    `json:"ok"`
	}
	report := struct {
		File    string    `json:"file"`
		Op      string    `json:"op"`
		DType   string    `json:"dtype"`
		Backend string    `json:"backend"`
		Grad    bool      `json:"grad"`
		OK      bool      `json:"ok"`
		Outputs []outJSON `json:"outputs"`
	}{File: file, Op: g.Meta["op"], DType: g.Meta["dtype"], Backend: be.Name, Grad: *grad}
	text := stdout
	if *asJSON {
		text = io.Discard
	}
	// The dtype is the file's own text, shown escaped (the op is a known one by now).
	fmt.Fprintf(text, "check: %s (%s, %s inputs) on %s\n", safeio.Clean(file), g.Meta["op"], safeio.Clean(g.Meta["dtype"]), be.Name)
	if *grad {
		fmt.Fprintf(text, "  gradients: %v\n", bw)
	}
	failed := ""
	for _, o := range got {
		c, err := g.Compare(o)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		verdict := "ok"
		if !c.OK {
			verdict = "DIFFERS"
			if failed == "" {
				failed = o.Name
			}
		}
		fmt.Fprintf(text, "  %-12s rel L2 %.2e ≤ %.1e  max-abs %.2e ≤ %.1e  %s\n", o.Name, c.Error.RelL2, c.Tolerance.RelL2, c.Error.MaxAbsScaled, c.Tolerance.MaxAbsScaled, verdict)
		report.Outputs = append(report.Outputs, outJSON{o.Name, c.Error.RelL2, c.Tolerance.RelL2, c.Error.MaxAbsScaled, c.Tolerance.MaxAbsScaled, c.OK})
	}
	if report.OK = failed == ""; *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	}
	if failed != "" {
		fmt.Fprintf(text, "%s differs from the float64 reference by more than the file's tolerance\n", failed)
		return exitStatus(4)
	}
	fmt.Fprintf(text, "every output agrees\n")
	return nil
}
