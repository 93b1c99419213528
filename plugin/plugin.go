// Package plugin loads a user's kernel library (a shared object that
// implements qwenref_plugin.h) and registers its kernels with
// model.RegisterKernel, so a backend spec such as chunked:delta=NAME runs
// them inside the model. It uses purego (dlopen without cgo), so qwenref
// needs no C compiler; the library may be written in anything with a C ABI.
package plugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/qwenref/qwenref/internal/dl"
	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// ABIVersion is QWENREF_PLUGIN_ABI of qwenref_plugin.h.
const ABIVersion = 1

// errLen is the size of the message buffer handed to every call.
const errLen = 512

// Symbols maps each backend part to the C function that implements it.
var Symbols = map[string]string{
	"delta":  "qwenref_gdn_core",
	"conv":   "qwenref_conv",
	"attn":   "qwenref_attention",
	"matmul": "qwenref_matmul",
}

// lib is one loaded library's bound entry points (nil when not exported).
type lib struct {
	name, path string
	gdn        func(out, q, k, v, g, beta unsafe.Pointer, t, nk, nv, dk, dv int32, st, err unsafe.Pointer, errlen int32) int32
	conv       func(y, x unsafe.Pointer, t, c int32, w unsafe.Pointer, k int32, st, err unsafe.Pointer, errlen int32) int32
	attn       func(out, q, k, v unsafe.Pointer, t, s, nh, nkv, d int32, scale float32, err unsafe.Pointer, errlen int32) int32
	matmul     func(y, x unsafe.Pointer, m, k, n int32, w, err unsafe.Pointer, errlen int32) int32
	bw         backward // the optional backward entry points (backward.go)
	bwOps      []string // the ops of those it exports
}

var (
	mu     sync.Mutex
	loaded = map[string]*loadedLib{} // by NAME
)

type loadedLib struct {
	path  string
	parts []string
	lib   *lib
}

// Load opens the library at path and registers NAME for every kernel it
// exports; it returns those parts (e.g. ["delta", "conv"]), none for a
// library of backward entry points alone (BackwardOf). Loading the
// same NAME=path again is a no-op; another path under a taken NAME is an
// error. The library stays loaded for the life of the process.
func Load(name, path string) ([]string, error) {
	mu.Lock()
	defer mu.Unlock()
	if l, ok := loaded[name]; ok {
		if l.path == path {
			return l.parts, nil
		}
		return nil, fmt.Errorf("plugin %s: the name is already taken by %s", name, safeio.Clean(l.path))
	}
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", name, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("plugin %s: %s is not a regular file", name, safeio.Clean(path))
	}
	// dlopen searches the library path for a name without a slash, not the
	// working directory: it would load another library than the file
	// checked above, or none. An absolute path is the file itself.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", name, err)
	}
	h, err := dl.Open(abs, dl.Now|dl.Local)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: cannot load %s: %v", name, safeio.Clean(path), err)
	}
	if _, err := dl.Sym(h, "qwenref_plugin_abi"); err != nil {
		return nil, fmt.Errorf("plugin %s: %s does not export qwenref_plugin_abi (is it built against qwenref_plugin.h?)", name, safeio.Clean(path))
	}
	var abi func() int32
	purego.RegisterLibFunc(&abi, h, "qwenref_plugin_abi")
	if v := abi(); v != ABIVersion {
		return nil, fmt.Errorf("plugin %s: %s has ABI version %d, this qwenref wants %d (rebuild it against this qwenref's plugin/qwenref_plugin.h)", name, safeio.Clean(path), v, ABIVersion)
	}
	l := &lib{name: name, path: path}
	bind := map[string]any{"delta": &l.gdn, "conv": &l.conv, "attn": &l.attn, "matmul": &l.matmul}
	var parts []string
	for _, part := range model.Parts {
		if _, err := dl.Sym(h, Symbols[part]); err != nil {
			continue
		}
		purego.RegisterLibFunc(bind[part], h, Symbols[part])
		parts = append(parts, part)
	}
	bwBinds := l.bw.binds()
	for _, op := range backwardOps {
		if _, err := dl.Sym(h, BackwardSymbols[op]); err != nil {
			continue
		}
		purego.RegisterLibFunc(bwBinds[op], h, BackwardSymbols[op])
		l.bwOps = append(l.bwOps, op)
	}
	if len(parts) == 0 && len(l.bwOps) == 0 {
		return nil, fmt.Errorf("plugin %s: %s exports none of qwenref_gdn_core, qwenref_conv, qwenref_attention, qwenref_matmul or their _backward forms", name, safeio.Clean(path))
	}
	kernels := map[string]any{"delta": deltaKernel{l}, "conv": convKernel{l}, "attn": attnKernel{l}, "matmul": matmulKernel{l}}
	for _, part := range parts {
		k := kernels[part]
		help := fmt.Sprintf("plug-in %s from %s (%s)", name, safeio.Clean(path), Symbols[part])
		if err := model.RegisterKernel(part, name, help, func() (any, error) { return k, nil }); err != nil {
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
	}
	loaded[name] = &loadedLib{path: path, parts: parts, lib: l}
	return parts, nil
}

// fail turns a non-zero return into an error carrying the library's message.
func (l *lib) fail(op string, rc int32, msg []byte) error {
	if rc == 0 {
		return nil
	}
	text := string(msg)
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		text = string(msg[:i])
	}
	if text == "" {
		text = "no message"
	}
	return fmt.Errorf("plugin %s %s returned %d: %s", l.name, op, rc, safeio.Text(text))
}

// ptr is the first element's address, or nil for an empty slice.
func ptr(s []float32) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// fits reports whether every dim fits the ABI's int (32 bits).
func fits(dims ...int) bool {
	for _, d := range dims {
		if d < 0 || d > 1<<31-1 {
			return false
		}
	}
	return true
}

type deltaKernel struct{ l *lib }

func (k deltaKernel) Forward(out, q, kk, v, g, beta []float32, d gateddelta.Dims, state []float32) error {
	if err := d.Check(out, q, kk, v, g, beta, state); err != nil {
		return err
	}
	if !fits(d.T*d.NV*d.DV, d.T*d.NK*d.DK, d.NV*d.DK*d.DV) {
		return fmt.Errorf("plugin %s: dims %+v overflow the ABI's int", k.l.name, d)
	}
	msg := make([]byte, errLen)
	rc := k.l.gdn(ptr(out), ptr(q), ptr(kk), ptr(v), ptr(g), ptr(beta), int32(d.T), int32(d.NK), int32(d.NV), int32(d.DK), int32(d.DV),
		ptr(state), unsafe.Pointer(&msg[0]), errLen)
	return k.l.fail("qwenref_gdn_core", rc, msg)
}

type convKernel struct{ l *lib }

func (k convKernel) Forward(y, x, w []float32, d conv1d.Dims, state []float32) error {
	if err := d.Check(y, x, w, state); err != nil {
		return err
	}
	t, c, kw := d.T, d.C, d.K
	if !fits(t*c, c*kw) {
		return fmt.Errorf("plugin %s: T=%d C=%d overflow the ABI's int", k.l.name, t, c)
	}
	msg := make([]byte, errLen)
	rc := k.l.conv(ptr(y), ptr(x), int32(t), int32(c), ptr(w), int32(kw), ptr(state), unsafe.Pointer(&msg[0]), errLen)
	return k.l.fail("qwenref_conv", rc, msg)
}

type attnKernel struct{ l *lib }

func (k attnKernel) Forward(out, q, kk, v []float32, d attention.Dims, scale float32) error {
	if err := d.Check(out, q, kk, v); err != nil {
		return err
	}
	if !fits(d.T*d.NH*d.D, d.S*d.NKV*d.D) {
		return fmt.Errorf("plugin %s: dims %+v overflow the ABI's int", k.l.name, d)
	}
	msg := make([]byte, errLen)
	rc := k.l.attn(ptr(out), ptr(q), ptr(kk), ptr(v), int32(d.T), int32(d.S), int32(d.NH), int32(d.NKV), int32(d.D), scale,
		unsafe.Pointer(&msg[0]), errLen)
	return k.l.fail("qwenref_attention", rc, msg)
}

type matmulKernel struct{ l *lib }

// MatMulT hands float32 weights over in place; bf16 ones are widened per
// call (a plug-in matmul is for checking, not for speed on bf16 weights).
func (k matmulKernel) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := linalg.CheckDims(y, x, m, w); err != nil {
		return err
	}
	if !fits(m*w.Cols, m*w.Rows, w.Rows*w.Cols) {
		return fmt.Errorf("plugin %s: matmul [%d,%d]x[%d,%d]ᵀ overflows the ABI's int", k.l.name, m, w.Cols, w.Rows, w.Cols)
	}
	wf := w.F32
	if w.IsBF16() {
		wf = w.ToFloat32()
	}
	msg := make([]byte, errLen)
	rc := k.l.matmul(ptr(y), ptr(x), int32(m), int32(w.Cols), int32(w.Rows), ptr(wf), unsafe.Pointer(&msg[0]), errLen)
	return k.l.fail("qwenref_matmul", rc, msg)
}

// ParseFlag splits a --plugin value NAME=PATH.
func ParseFlag(v string) (name, path string, err error) {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return "", "", fmt.Errorf("--plugin %q: want NAME=PATH.so", v)
	}
	return name, path, nil
}
