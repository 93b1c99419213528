package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
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

Your own kernel: build a shared library against plugin/qwenref_plugin.h
and name it with --plugin (docs/kernel-engineers.md).

Examples:
  qwenref golden --op gdn-core --dtype bf16 --seqlens 37,300,1 --out packed.safetensors
  qwenref check packed.safetensors --backend chunked
  qwenref check packed.safetensors --plugin mine=./libmine.so --backend chunked:delta=mine`, stderr)
	backend := fs.String("backend", defaultBackend(), fmt.Sprintf("kernels to run on: %v", model.BackendNames()))
	plugins := addPluginFlag(fs)
	// The file comes first or last: flag parsing stops at a positional.
	var file string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		file, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if file == "" {
		return usageError(fs, stderr, "give the golden file: qwenref check GOLDEN.safetensors")
	}
	if err := loadPlugins(plugins); err != nil {
		return err
	}
	meta, err := readMetadata(file)
	if err != nil {
		return err
	}
	st, err := weights.Open(file)
	if err != nil {
		return err
	}
	defer st.Close()
	be, err := model.NewBackend(*backend)
	if err != nil {
		return err
	}
	defer be.Close()
	got, err := runGoldenOp(meta, st, be)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	fmt.Fprintf(stdout, "check: %s (%s, %s inputs) on %s\n", file, meta["op"], meta["dtype"], be.Name)
	failed := ""
	for _, o := range got {
		want, _, err := st.Float32(o.name)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		tol, err := reference.ReadTolerance(meta, o.name)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		e := tensor.CompareStage(o.data, want)
		verdict := "ok"
		if !e.Within(tol) {
			verdict = "DIFFERS"
			if failed == "" {
				failed = o.name
			}
		}
		fmt.Fprintf(stdout, "  %-12s rel L2 %.2e ≤ %.1e  max-abs %.2e ≤ %.1e  %s\n", o.name, e.RelL2, tol.RelL2, e.MaxAbsScaled, tol.MaxAbsScaled, verdict)
	}
	if failed != "" {
		fmt.Fprintf(stdout, "%s differs from the float64 reference by more than the file's tolerance\n", failed)
		return exitStatus(4)
	}
	fmt.Fprintf(stdout, "every output agrees\n")
	return nil
}

type namedOutput struct {
	name string
	data []float32
}

// runGoldenOp runs the file's op on its inputs; every dimension comes
// from the metadata and is checked against the tensors' shapes first.
func runGoldenOp(meta map[string]string, st *weights.Store, be *model.Backend) ([]namedOutput, error) {
	dims := map[string]int{}
	dim := func(keys ...string) error {
		for _, k := range keys {
			v, err := strconv.Atoi(meta[k])
			if err != nil || v < 0 || v > 1<<30 {
				return fmt.Errorf("metadata %s is %q, not a dimension", k, meta[k])
			}
			dims[k] = v
		}
		return nil
	}
	read := func(name string, shape ...int) ([]float32, error) {
		info, ok := st.Info(name)
		if !ok {
			return nil, fmt.Errorf("no tensor %s", name)
		}
		if !slices.Equal(info.Shape, shape) {
			return nil, fmt.Errorf("tensor %s has shape %v, the metadata says %v", name, info.Shape, shape)
		}
		x, _, err := st.Float32(name)
		return x, err
	}
	switch op := meta["op"]; op {
	case "gdn-core":
		if err := dim("T", "NK", "NV", "DK", "DV"); err != nil {
			return nil, err
		}
		d := gateddelta.Dims{T: dims["T"], NK: dims["NK"], NV: dims["NV"], DK: dims["DK"], DV: dims["DV"]}
		if d.NK == 0 || d.NV%d.NK != 0 {
			return nil, fmt.Errorf("metadata NV=%d is not a multiple of NK=%d", d.NV, d.NK)
		}
		segs := []int{d.T}
		stShape := []int{d.NV, d.DK, d.DV}
		if cu := meta["cu_seqlens"]; cu != "" {
			var err error
			if segs, err = parseCuSeqlens(cu, d.T); err != nil {
				return nil, err
			}
			stShape = append([]int{len(segs)}, stShape...)
		}
		var in [6][]float32
		for i, t := range []struct {
			name  string
			shape []int
		}{{"q", []int{d.T, d.NK, d.DK}}, {"k", []int{d.T, d.NK, d.DK}}, {"v", []int{d.T, d.NV, d.DV}},
			{"g", []int{d.T, d.NV}}, {"beta", []int{d.T, d.NV}}, {"initial_state", stShape}} {
			x, err := read(t.name, t.shape...)
			if err != nil {
				return nil, err
			}
			in[i] = x
		}
		out := make([]float32, d.T*d.NV*d.DV)
		if err := reference.PackedRun(be.Delta, out, in[0], in[1], in[2], in[3], in[4], d, segs, in[5]); err != nil {
			return nil, err
		}
		return []namedOutput{{"out", out}, {"final_state", in[5]}}, nil
	case "conv":
		if err := dim("T", "C", "K"); err != nil {
			return nil, err
		}
		t, c, k := dims["T"], dims["C"], dims["K"]
		x, err := read("x", t, c)
		if err != nil {
			return nil, err
		}
		w, err := read("weight", c, k)
		if err != nil {
			return nil, err
		}
		state, err := read("initial_state", k, c)
		if err != nil {
			return nil, err
		}
		y := make([]float32, t*c)
		if err := be.Conv.Forward(y, x, t, c, w, k, state); err != nil {
			return nil, err
		}
		return []namedOutput{{"y", y}, {"final_state", state}}, nil
	case "attention":
		if err := dim("T", "S", "NH", "NKV", "D"); err != nil {
			return nil, err
		}
		d := attention.Dims{T: dims["T"], S: dims["S"], NH: dims["NH"], NKV: dims["NKV"], D: dims["D"]}
		scale, err := strconv.ParseFloat(meta["scale"], 32)
		if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
			return nil, fmt.Errorf("metadata scale is %q, not a positive number", meta["scale"])
		}
		q, err := read("q", d.T, d.NH, d.D)
		if err != nil {
			return nil, err
		}
		k, err := read("k", d.S, d.NKV, d.D)
		if err != nil {
			return nil, err
		}
		v, err := read("v", d.S, d.NKV, d.D)
		if err != nil {
			return nil, err
		}
		out := make([]float32, d.T*d.NH*d.D)
		if err := be.Attn.Forward(out, q, k, v, d, float32(scale)); err != nil {
			return nil, err
		}
		return []namedOutput{{"out", out}}, nil
	case "gdn-layer", "attention-layer", "decoder-layer":
		d, err := reference.LayerDimsFromMeta(meta)
		if err != nil {
			return nil, err
		}
		out, err := reference.RunLayerVector(op, d, read, reference.LayerKernels{MatMul: be.MatMul, Conv: be.Conv, Delta: be.Delta, Attn: be.Attn})
		if err != nil {
			return nil, err
		}
		return []namedOutput{{"out", out}}, nil
	default:
		return nil, fmt.Errorf("metadata op is %q: not a file 'qwenref golden' wrote (ops: gdn-core, conv, attention, gdn-layer, attention-layer, decoder-layer)", op)
	}
}

// parseCuSeqlens reads "0,37,337,338" into lengths, checking that it
// starts at 0, rises strictly and ends at T.
func parseCuSeqlens(cu string, t int) ([]int, error) {
	fields := strings.Split(cu, ",")
	if len(fields) < 2 || len(fields) > t+1 {
		return nil, fmt.Errorf("metadata cu_seqlens %q: want 0,…,T with T = %d", shorten(cu, 40), t)
	}
	var segs []int
	prev := -1
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || (i == 0 && n != 0) || n <= prev || n > t {
			return nil, fmt.Errorf("metadata cu_seqlens %q: want 0,…,T rising, with T = %d", shorten(cu, 40), t)
		}
		if i > 0 {
			segs = append(segs, n-prev)
		}
		prev = n
	}
	if prev != t {
		return nil, fmt.Errorf("metadata cu_seqlens %q ends at %d, not T = %d", shorten(cu, 40), prev, t)
	}
	return segs, nil
}
