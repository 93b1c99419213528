package plugin

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// BackwardSymbols maps each gradient file's op to the optional C function
// that computes its backward (qwenref_plugin.h); `qwenref check --grad`
// runs them.
var BackwardSymbols = map[string]string{
	"gdn-core":      "qwenref_gdn_core_backward",
	"conv":          "qwenref_conv_backward",
	"attention":     "qwenref_attention_backward",
	"gated-rmsnorm": "qwenref_gated_rmsnorm_backward",
}

// backwardOps is BackwardSymbols' keys in the header's order.
var backwardOps = []string{"gdn-core", "conv", "attention", "gated-rmsnorm"}

// backward holds a library's bound backward entry points (nil when not
// exported).
type backward struct {
	gdn  func(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal unsafe.Pointer, t, nk, nv, kd, vd int32, err unsafe.Pointer, errlen int32) int32
	conv func(dx, dw, dbias, dstate, x, w, bias, state, dy, dfinal unsafe.Pointer, t, c, k int32, err unsafe.Pointer, errlen int32) int32
	attn func(dq, dk, dv, dgate, q, k, v, gate, dout unsafe.Pointer, t, s, nh, nkv, d int32, scale float32, err unsafe.Pointer, errlen int32) int32
	norm func(dx, dz, dw, x, z, w, dy unsafe.Pointer, rows, dim int32, eps float32, err unsafe.Pointer, errlen int32) int32
}

// binds returns the field each backward symbol binds to.
func (b *backward) binds() map[string]any {
	return map[string]any{"gdn-core": &b.gdn, "conv": &b.conv, "attention": &b.attn, "gated-rmsnorm": &b.norm}
}

// Backward is a loaded plug-in's backward entry points, with the method
// set of verify.Backward: `qwenref check --grad --plugin NAME=LIB.so`
// runs them. An op the library does not export returns an error naming
// the missing symbol.
type Backward struct{ l *lib }

// BackwardOf returns the backward entry points of the plug-in loaded as
// name; a library that exports none of them is refused by name.
func BackwardOf(name string) (*Backward, error) {
	mu.Lock()
	defer mu.Unlock()
	l, ok := loaded[name]
	if !ok {
		return nil, fmt.Errorf("plugin %s is not loaded", name)
	}
	if len(l.lib.bwOps) == 0 {
		syms := make([]string, len(backwardOps))
		for i, op := range backwardOps {
			syms[i] = BackwardSymbols[op]
		}
		return nil, fmt.Errorf("plugin %s: %s exports no backward entry point (%s): it cannot check gradients", name, l.path, strings.Join(syms, ", "))
	}
	return &Backward{l.lib}, nil
}

// BackwardOfFlags is the backward of the one library a list of --plugin
// NAME=PATH values loaded (BackwardOf), what --grad runs.
func BackwardOfFlags(flags []string) (*Backward, error) {
	if len(flags) != 1 {
		return nil, fmt.Errorf("--grad runs one plug-in's backward: give one --plugin, not %d", len(flags))
	}
	name, _, err := ParseFlag(flags[0])
	if err != nil {
		return nil, err
	}
	return BackwardOf(name)
}

// String names the backward in a check's report.
func (b *Backward) String() string { return "plug-in " + b.l.name + "'s backward" }

// Ops are the gradient files' ops the library has a backward for.
func (b *Backward) Ops() []string { return b.l.bwOps }

// missing is the error for an op the library does not export.
func (b *Backward) missing(op string) error {
	return fmt.Errorf("plugin %s exports no %s: it cannot check a %s gradient file (it has: %s)", b.l.name, BackwardSymbols[op], op, strings.Join(b.l.bwOps, ", "))
}

// lens checks that every slice has its length and that each fits the
// ABI's int.
func lens(op string, name string, got ...[2]int) error {
	for i, g := range got {
		if g[0] != g[1] {
			return fmt.Errorf("plugin %s %s: argument %d has %d values, want %d", name, op, i+1, g[0], g[1])
		}
		if !fits(g[1]) {
			return fmt.Errorf("plugin %s %s: %d values overflow the ABI's int", name, op, g[1])
		}
	}
	return nil
}

// GDNBackward calls qwenref_gdn_core_backward for one sequence.
func (b *Backward) GDNBackward(dq, dk, dv, dg, dbeta, dstate, q, k, v, g, beta, state, dout, dfinal []float32, d gateddelta.Dims) error {
	if b.l.bw.gdn == nil {
		return b.missing("gdn-core")
	}
	if err := d.Check(dout, q, k, v, g, beta, state); err != nil {
		return err
	}
	if err := d.Check(dout, dq, dk, dv, dg, dbeta, dstate); err != nil {
		return err
	}
	if dfinal == nil {
		dfinal = make([]float32, len(state))
	}
	if err := lens(BackwardSymbols["gdn-core"], b.l.name, [2]int{len(dfinal), len(state)}, [2]int{len(q), len(q)}, [2]int{len(v), len(v)}); err != nil {
		return err
	}
	msg := make([]byte, errLen)
	rc := b.l.bw.gdn(ptr(dq), ptr(dk), ptr(dv), ptr(dg), ptr(dbeta), ptr(dstate), ptr(q), ptr(k), ptr(v), ptr(g), ptr(beta), ptr(state), ptr(dout), ptr(dfinal),
		int32(d.T), int32(d.NK), int32(d.NV), int32(d.DK), int32(d.DV), unsafe.Pointer(&msg[0]), errLen)
	return b.l.fail(BackwardSymbols["gdn-core"], rc, msg)
}

// ConvBackward calls qwenref_conv_backward for one sequence; bias nil
// passes NULL for bias and dbias.
func (b *Backward) ConvBackward(dx, dw, dbias, dstate, x, w, bias, state, dy, dfinal []float32, d conv1d.Dims) error {
	if b.l.bw.conv == nil {
		return b.missing("conv")
	}
	if err := d.Check(dy, x, w, state); err != nil {
		return err
	}
	if err := d.Check(dx, dy, dw, dstate); err != nil {
		return err
	}
	if dfinal == nil {
		dfinal = make([]float32, len(state))
	}
	want := 0
	if bias != nil {
		want = d.C
	}
	if err := lens(BackwardSymbols["conv"], b.l.name, [2]int{len(dfinal), len(state)}, [2]int{len(bias), want}, [2]int{len(dbias), want}, [2]int{len(x), len(x)}); err != nil {
		return err
	}
	msg := make([]byte, errLen)
	rc := b.l.bw.conv(ptr(dx), ptr(dw), ptr(dbias), ptr(dstate), ptr(x), ptr(w), ptr(bias), ptr(state), ptr(dy), ptr(dfinal),
		int32(d.T), int32(d.C), int32(d.K), unsafe.Pointer(&msg[0]), errLen)
	return b.l.fail(BackwardSymbols["conv"], rc, msg)
}

// AttentionBackward calls qwenref_attention_backward; gate nil passes
// NULL for gate and dgate.
func (b *Backward) AttentionBackward(dq, dk, dv, dgate, q, k, v, gate, dout []float32, d attention.Dims, scale float32) error {
	if b.l.bw.attn == nil {
		return b.missing("attention")
	}
	if err := d.Check(dout, q, k, v); err != nil {
		return err
	}
	if err := d.Check(dq, dout, dk, dv); err != nil {
		return err
	}
	want := 0
	if gate != nil {
		want = len(q)
	}
	if err := lens(BackwardSymbols["attention"], b.l.name, [2]int{len(gate), want}, [2]int{len(dgate), want}, [2]int{len(q), len(q)}, [2]int{len(k), len(k)}); err != nil {
		return err
	}
	msg := make([]byte, errLen)
	rc := b.l.bw.attn(ptr(dq), ptr(dk), ptr(dv), ptr(dgate), ptr(q), ptr(k), ptr(v), ptr(gate), ptr(dout),
		int32(d.T), int32(d.S), int32(d.NH), int32(d.NKV), int32(d.D), scale, unsafe.Pointer(&msg[0]), errLen)
	return b.l.fail(BackwardSymbols["attention"], rc, msg)
}

// GatedRMSNormBackward calls qwenref_gated_rmsnorm_backward over
// len(x)/dim rows.
func (b *Backward) GatedRMSNormBackward(dx, dz, dw, x, z, w, dy []float32, dim int, eps float32) error {
	if b.l.bw.norm == nil {
		return b.missing("gated-rmsnorm")
	}
	if dim <= 0 || len(x)%dim != 0 {
		return fmt.Errorf("plugin %s %s: %d values are not rows of %d", b.l.name, BackwardSymbols["gated-rmsnorm"], len(x), dim)
	}
	n := len(x)
	if err := lens(BackwardSymbols["gated-rmsnorm"], b.l.name, [2]int{len(z), n}, [2]int{len(dy), n}, [2]int{len(dx), n}, [2]int{len(dz), n},
		[2]int{len(w), dim}, [2]int{len(dw), dim}); err != nil {
		return err
	}
	msg := make([]byte, errLen)
	rc := b.l.bw.norm(ptr(dx), ptr(dz), ptr(dw), ptr(x), ptr(z), ptr(w), ptr(dy), int32(n/dim), int32(dim), eps, unsafe.Pointer(&msg[0]), errLen)
	return b.l.fail(BackwardSymbols["gated-rmsnorm"], rc, msg)
}
