package reference

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// The kernels whose error on a vector's rounded inputs sets its stored
// tolerance: qwenref's own float32 kernels.
var (
	gdnKernels  = []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Chunked{}}
	convKernels = []conv1d.Kernel{conv1d.Naive{}, conv1d.Chunked{}}
	attnKernels = []attention.Kernel{attention.Naive{}, attention.Chunked{}}
)

// Tolerance rule of a vector (docs/golden-format.md): the worst error of
// qwenref's kernels on the rounded inputs times toleranceMargin, and no
// less than outputRoundingMargin times the error of storing the reference
// output in the vector's dtype (a kernel that writes its output in that
// dtype must pass), and no less than minRelL2.
const (
	toleranceMargin      = 8
	outputRoundingMargin = 4
	minRelL2             = 1e-6
)

// vectorOutput is one expected output of a vector.
type vectorOutput struct {
	name string
	want []float64
}

// VectorTolerance is the bar per output that a correct kernel meets.
type VectorTolerance map[string]tensor.Tolerance

// set writes the bars as metadata: tol.<output>.rel_l2 and
// tol.<output>.max_abs_scaled (verify.ReadTolerance reads them back).
func (t VectorTolerance) set(meta map[string]string) {
	t.setBars(meta)
	meta["tol.rule"] = fmt.Sprintf("max(%d x worst of qwenref's naive and chunked kernels on these inputs, %d x the error of storing the output in the input dtype, %g)",
		toleranceMargin, outputRoundingMargin, minRelL2)
}

// setBars writes the bars without the rule.
func (t VectorTolerance) setBars(meta map[string]string) {
	for name, tol := range t {
		meta["tol."+name+".rel_l2"] = strconv.FormatFloat(tol.RelL2, 'g', 3, 64)
		meta["tol."+name+".max_abs_scaled"] = strconv.FormatFloat(tol.MaxAbsScaled, 'g', 3, 64)
	}
}

// measureTolerance runs kernel k (for k < n) and returns each output's bar.
func measureTolerance(dtype string, outs []vectorOutput, run func(k int) ([][]float32, error), n int) (VectorTolerance, error) {
	worst := make([]tensor.StageError, len(outs))
	for k := 0; k < n; k++ {
		got, err := run(k)
		if err != nil {
			return nil, err
		}
		for i, o := range outs {
			e := tensor.CompareStage(got[i], Narrow(o.want))
			worst[i].RelL2 = math.Max(worst[i].RelL2, e.RelL2)
			worst[i].MaxAbsScaled = math.Max(worst[i].MaxAbsScaled, e.MaxAbsScaled)
		}
	}
	tol := VectorTolerance{}
	for i, o := range outs {
		stored := Narrow(o.want)
		if err := RoundTo(dtype, stored); err != nil {
			return nil, err
		}
		r := tensor.CompareStage(stored, Narrow(o.want))
		rel := math.Max(minRelL2, math.Max(toleranceMargin*worst[i].RelL2, outputRoundingMargin*r.RelL2))
		abs := math.Max(10*minRelL2, math.Max(toleranceMargin*worst[i].MaxAbsScaled, outputRoundingMargin*r.MaxAbsScaled))
		tol[o.name] = tensor.Tolerance{RelL2: rel, MaxAbsScaled: abs}
	}
	return tol, nil
}

// segments checks packed sequence lengths against T; none means one
// sequence of T tokens.
func segments(t int, lens []int) ([]int, error) {
	if len(lens) == 0 {
		return []int{t}, nil
	}
	sum := 0
	for _, n := range lens {
		if n < 1 {
			return nil, fmt.Errorf("--seqlens: every length must be ≥ 1, not %d", n)
		}
		sum += n
		if sum > t {
			break
		}
	}
	if sum != t {
		return nil, fmt.Errorf("--seqlens sum to %d, not T = %d", sum, t)
	}
	return lens, nil
}

// cuSeqlens is fla's cu_seqlens: 0 and the running sums, as text.
func cuSeqlens(segs []int) string {
	parts, at := []string{"0"}, 0
	for _, n := range segs {
		at += n
		parts = append(parts, strconv.Itoa(at))
	}
	return strings.Join(parts, ",")
}

// packedReference runs the float64 recurrence on each packed sequence
// from its own initial state (states holds one [NV, DK, DV] per sequence).
func packedReference(in *GDNInputs, segs []int, states []float32) (out, final []float64, err error) {
	d := in.Dims
	out, final = make([]float64, d.T*d.NV*d.DV), Widen(states)
	q, k, v, g, b := Widen(in.Q), Widen(in.K), Widen(in.V), Widen(in.G), Widen(in.Beta)
	at, sz := 0, d.NV*d.DK*d.DV
	for i, n := range segs {
		sd := d
		sd.T = n
		qk, hv := d.NK*d.DK, d.NV*d.DV
		err := GatedDeltaRule(out[at*hv:(at+n)*hv], q[at*qk:(at+n)*qk], k[at*qk:(at+n)*qk], v[at*hv:(at+n)*hv],
			g[at*d.NV:(at+n)*d.NV], b[at*d.NV:(at+n)*d.NV], sd, final[i*sz:(i+1)*sz])
		if err != nil {
			return nil, nil, err
		}
		at += n
	}
	return out, final, nil
}

// packedRun is packedReference for a float32 kernel.
func packedRun(kern gateddelta.Kernel, in *GDNInputs, segs []int, states []float32) ([][]float32, error) {
	d := in.Dims
	out, final := make([]float32, d.T*d.NV*d.DV), append([]float32(nil), states...)
	at, sz := 0, d.NV*d.DK*d.DV
	qk, hv := d.NK*d.DK, d.NV*d.DV
	for i, n := range segs {
		sd := d
		sd.T = n
		err := kern.Forward(out[at*hv:(at+n)*hv], in.Q[at*qk:(at+n)*qk], in.K[at*qk:(at+n)*qk], in.V[at*hv:(at+n)*hv],
			in.G[at*d.NV:(at+n)*d.NV], in.Beta[at*d.NV:(at+n)*d.NV], sd, final[i*sz:(i+1)*sz])
		if err != nil {
			return nil, err
		}
		at += n
	}
	return [][]float32{out, final}, nil
}

// PackedRun runs a gdn-core kernel over packed sequences: each segment of
// segs tokens from its own [NV, DK, DV] state in states (updated in place
// to the final states). The check command and tests use it.
func PackedRun(kern gateddelta.Kernel, out, q, k, v, g, beta []float32, d gateddelta.Dims, segs []int, states []float32) error {
	if _, err := segments(d.T, segs); err != nil {
		return err
	}
	if len(states) != len(segs)*d.NV*d.DK*d.DV {
		return fmt.Errorf("gdn-core: %d state values for %d sequences of [%d, %d, %d]", len(states), len(segs), d.NV, d.DK, d.DV)
	}
	if err := d.Check(out, q, k, v, g, beta, states[:d.NV*d.DK*d.DV]); err != nil {
		return err
	}
	in := &GDNInputs{Dims: d, Q: q, K: k, V: v, G: g, Beta: beta}
	got, err := packedRun(kern, in, segs, states)
	if err != nil {
		return err
	}
	copy(out, got[0])
	copy(states, got[1])
	return nil
}
