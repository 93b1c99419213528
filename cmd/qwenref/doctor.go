package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/qwenref/qwenref/doctor"
	"github.com/qwenref/qwenref/model"
)

func init() {
	register(&command{name: "doctor", summary: "check a PyTorch setup: will transformers' GDN layers fall back, and what it costs", run: runDoctor})
}

// exitStatus asks Main to exit with this code once the command has said everything itself
// (doctor's 4: "layers will fall back" is a finding, not a failure).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func runDoctor(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("doctor", "[--python PATH] [--model DIR|CONFIG.json|org/name] [--json]", `
Runs a small probe with your Python interpreter (default: python3 on PATH), in
your environment (virtualenv, PYTHONPATH, user site-packages; nothing is
installed or compiled) and reports whether transformers' Qwen3.5/3.6
linear-attention layers will take their fast path: the versions of torch,
transformers, flash-linear-attention (fla) and causal-conv1d, CUDA and nvcc,
and which of causal_conv1d_fn, causal_conv1d_update, chunk_gated_delta_rule and
fused_recurrent_gated_delta_rule transformers will find, decided the way the
installed transformers decides it. With --model (a directory, its
config.json, or org/name from the Hugging Face cache; only config.json is
read) it counts the layers that fall back, and gives the cost qwenref
measured on an H200 and what would fix it. The probe is stopped after
--timeout (importing torch and initialising CUDA can take a while).

Exit status: 0 fast path available, 4 layers will fall back (or the setup
cannot run the model), 1 the probe could not run or the config could not be
read, 2 usage error.

Examples:
  qwenref doctor
  qwenref doctor --python ~/venvs/train/bin/python --model /data/Qwen3.6-27B
  qwenref doctor --model Qwen/Qwen3.6-27B --json`, stderr)
	python := fs.String("python", "", "the Python interpreter your jobs use (default: python3 on PATH)")
	modelArg := addModelFlag(fs, " (or its config.json): count the layers that fall back")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", doctor.DefaultTimeout, "stop the probe after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError(fs, stderr, "--timeout must be positive, got %s", *timeout)
	}

	var layers *doctor.Layers
	if *modelArg != "" {
		path, err := model.ResolveModel(*modelArg, stderr)
		if err != nil {
			return doctorFailed(stdout, *asJSON, err)
		}
		if layers, err = doctor.LayersFromConfig(path); err != nil {
			return doctorFailed(stdout, *asJSON, err)
		}
	}
	probe, err := doctor.Run(context.Background(), doctor.Options{Python: *python, Timeout: *timeout})
	if err != nil {
		return doctorFailed(stdout, *asJSON, err)
	}
	report := doctor.Assess(probe, layers)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else if err := report.WriteText(stdout); err != nil {
		return err
	}
	if report.ExitCode != 0 {
		return exitStatus(report.ExitCode)
	}
	return nil
}

// doctorFailed reports a failure (exit 1); with --json, stdout still gets a JSON object.
func doctorFailed(stdout io.Writer, asJSON bool, err error) error {
	if asJSON {
		fmt.Fprintf(stdout, "%s\n", doctor.FailureJSON(err))
	}
	return err
}
