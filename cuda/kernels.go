package cuda

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// The host-slice kernels below copy their inputs to the GPU, run, and copy
// the results back: they exist to check the GPU against the CPU backends on
// the same inputs, not to be fast (the device-resident paths are the
// benchmarks and GDNLayer). Each output is poisoned with NaN on the device
// before the kernel runs, so an element a kernel forgets to write fails
// any comparison.

// Conv is conv1d.Kernel on the GPU (fp32 throughout).
type Conv struct{ Dev *Device }

var _ conv1d.Kernel = Conv{}

// Forward implements conv1d.Kernel.
func (c Conv) Forward(y, x, w []float32, d conv1d.Dims, state []float32) error {
	if err := d.Check(y, x, w, state); err != nil {
		return err
	}
	t, ch, k := d.T, d.C, d.K
	return c.Dev.call("conv", func() int { return cConv(y, x, t, ch, w, k, state) })
}

// GDNVariant selects the algorithm and precision of GatedDelta.
type GDNVariant int

const (
	// ChunkF32 is the chunked algorithm (64-token chunks) in fp32, SIMT; it
	// is the verification variant and takes any dk, dv with dk ≤ 128 or so
	// (shared memory).
	ChunkF32 GDNVariant = iota
	// ChunkBF16 is the fast path: bf16 q/k/v on tensor cores with an fp32
	// state; it needs dk = dv = 128 (every Qwen3.5/3.6 size).
	ChunkBF16
	// Recurrent is the per-token recurrence in fp32 (what decode runs).
	Recurrent
	// Auto picks ChunkBF16 where it applies (dk = dv = 128) and ChunkF32
	// elsewhere; the registered "cuda" model backend uses it.
	Auto
)

// ScanWG is ChunkBF16 with the warpgroup-MMA scan (launch shape 1064: one
// warpgroup, 64 value columns), which only sm_90 devices run; other values
// of 100 and up name the tensor-core scan's other launch shapes.
const ScanWG GDNVariant = 1064

func (v GDNVariant) String() string {
	switch v {
	case ChunkF32:
		return "chunk-f32"
	case ChunkBF16:
		return "chunk-bf16"
	case Recurrent:
		return "recurrent"
	case Auto:
		return "auto"
	}
	if v >= 100 {
		return fmt.Sprintf("chunk-bf16/scan-%d", int(v))
	}
	return fmt.Sprintf("GDNVariant(%d)", int(v))
}

// GatedDelta is gateddelta.Kernel on the GPU.
type GatedDelta struct {
	Dev     *Device
	Variant GDNVariant
}

var _ gateddelta.Kernel = GatedDelta{}

// Precision is bf16 for the variants that may take the tensor-core path.
func (g GatedDelta) Precision() model.Precision {
	if g.Variant == ChunkBF16 || g.Variant == Auto {
		return model.PrecisionBF16
	}
	return model.PrecisionF32
}

// Supports refuses, for ChunkBF16, head dims other than 128/128, and says
// so for Auto, which then runs ChunkF32 instead.
func (g GatedDelta) Supports(cfg *model.Config) error {
	dk, dv := cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim
	if (g.Variant != ChunkBF16 && g.Variant != Auto) || dk == 128 && dv == 128 {
		return nil
	}
	if g.Variant == Auto {
		return model.UnsupportedShape("the bf16 tensor-core delta rule needs head dims 128/128, not %d/%d: the fp32 SIMT chunked kernel runs instead", dk, dv)
	}
	return model.UnsupportedShape("the bf16 tensor-core delta rule needs head dims 128/128, not %d/%d", dk, dv)
}

// Forward implements gateddelta.Kernel.
func (g GatedDelta) Forward(out, q, k, v, gg, beta []float32, d gateddelta.Dims, state []float32) error {
	if err := d.Check(out, q, k, v, gg, beta, state); err != nil {
		return err
	}
	v2 := g.Variant
	if v2 == Auto {
		v2 = ChunkF32
		if d.DK == 128 && d.DV == 128 {
			v2 = ChunkBF16
		}
	}
	return g.Dev.call("gdn/"+v2.String(), func() int {
		return cGDN(out, q, k, v, gg, beta, d, state, int(v2))
	})
}

// Attention is attention.Kernel on the GPU: fp32, one warp per (query,
// head), online softmax over the keys in order (flash style, O(1) memory
// beyond the output). It is the verification kernel; head dims up to 256.
type Attention struct{ Dev *Device }

var _ attention.Kernel = Attention{}

// Supports refuses head dims over 256.
func (a Attention) Supports(cfg *model.Config) error {
	if cfg.HeadDim > 256 {
		return model.UnsupportedShape("the attention kernel takes head dims up to 256, not %d", cfg.HeadDim)
	}
	return nil
}

// Forward implements attention.Kernel.
func (a Attention) Forward(out, q, k, v []float32, d attention.Dims, scale float32) error {
	if err := d.Check(out, q, k, v); err != nil {
		return err
	}
	return a.Dev.call("attention", func() int { return cAttention(out, q, k, v, d.T, d.S, d.NH, d.NKV, d.D, scale) })
}

// attentionDecode runs the device model's decode attention (one query per
// head against the first s of capacity cached keys, output gate σ(gate))
// on host data, for its check against the CPU: q and gate [nh, 256], k
// and v [capacity, nkv, 256], out [nh, 256].
func (d *Device) attentionDecode(out, q, k, v, gate []float32, s, capacity, nh, nkv int) error {
	const hd = 256
	if s < 1 || s > capacity || nh <= 0 || nkv <= 0 || nh%nkv != 0 || len(out) != nh*hd || len(q) != nh*hd ||
		len(gate) != nh*hd || len(k) != capacity*nkv*hd || len(v) != len(k) {
		return fmt.Errorf("cuda: decode attention: s=%d capacity=%d nh=%d nkv=%d with %d/%d/%d/%d/%d values",
			s, capacity, nh, nkv, len(out), len(q), len(k), len(v), len(gate))
	}
	return d.call("attention_decode", func() int { return cAttentionDecode(out, q, k, v, gate, s, capacity, nh, nkv) })
}

// FlashShapes names the prefill flash attention's launch shapes for its
// test and bench: mma.sync shapes (100·warps + key tile), which a device
// runs when its shared memory holds them, and warpgroup-MMA shapes
// (1000·warpgroups + key tile), which only sm_90 devices run.
var FlashShapes = []int{432, 464, 832, 864, 2064}

// flashAttention runs the device model's prefill flash attention on host
// data, for its check against the CPU: q and gate [t, nh, 256] at positions
// pos0.., k and v [pos0+t, nkv, 256], out [t, nh, 256]; variant a shape of
// FlashShapes or 0 for the default.
func (d *Device) flashAttention(out, q, k, v, gate []float32, t, pos0, nh, nkv, variant int) error {
	const hd = 256
	if t < 1 || pos0 < 0 || nh <= 0 || nkv <= 0 || nh%nkv != 0 || len(out) != t*nh*hd || len(q) != len(out) ||
		len(gate) != len(out) || len(k) != (pos0+t)*nkv*hd || len(v) != len(k) {
		return fmt.Errorf("cuda: flash attention: t=%d pos0=%d nh=%d nkv=%d with %d/%d/%d/%d/%d values",
			t, pos0, nh, nkv, len(out), len(q), len(k), len(v), len(gate))
	}
	return d.call("flash_attention", func() int { return cFlashAttention(out, q, k, v, gate, t, pos0, nh, nkv, variant) })
}

// GEMV output modes of gemv (the decode GEMV's fused output stages).
const (
	gemvBF16   = 0 // y = bf16(W x)
	gemvAddF32 = 1 // y += W x
	gemvF32    = 2 // y = W x
	gemvSwiGLU = 3 // W = gate over up rows: y = bf16(SiLU(g)·u)
)

// moeRoute runs the device model's MoE router on host logits [t, e]: each
// row's k experts (descending probability, exact ties to the lower index)
// and their weights, renormalised when norm.
func (d *Device) moeRoute(logits []float32, t, e, k int, norm bool) ([]int32, []float32, error) {
	if t <= 0 || e <= 0 || k <= 0 || k > e || len(logits) != t*e {
		return nil, nil, fmt.Errorf("cuda: moe route: t=%d e=%d k=%d with %d logits", t, e, k, len(logits))
	}
	ids, w := make([]int32, t*k), make([]float32, t*k)
	err := d.call("moe_route", func() int { return cMoERoute(ids, w, logits, t, e, k, norm) })
	return ids, w, err
}

// gemv runs the device model's decode GEMV on host data, for its check
// against the CPU: x [k], w [n, k], y [n] ([n/2] for gemvSwiGLU), read
// first for gemvAddF32.
func (d *Device) gemv(y, x, w []float32, n, k, mode int) error {
	ny := n
	if mode == gemvSwiGLU {
		ny = n / 2
	}
	if n <= 0 || k <= 0 || mode < gemvBF16 || mode > gemvSwiGLU || len(x) != k || len(w) != n*k || len(y) != ny {
		return fmt.Errorf("cuda: gemv: n=%d k=%d mode %d with %d/%d/%d values", n, k, mode, len(y), len(x), len(w))
	}
	return d.call("gemv", func() int { return cGEMV(y, x, w, n, k, mode) })
}

// MatMul is linalg.MatMuler on the GPU: cuBLAS bf16 tensor cores with fp32
// accumulation. x is rounded to bf16 on the device; W is uploaded once
// (rounded to bf16 if stored as F32) and stays resident, keyed by its
// pointer, until the Device closes.
type MatMul struct{ Dev *Device }

var _ linalg.MatMuler = MatMul{}

// Precision is bf16: x and W are rounded to bf16 for the tensor cores.
func (MatMul) Precision() model.Precision { return model.PrecisionBF16 }

// MatMulT implements linalg.MatMuler.
func (m MatMul) MatMulT(y, x []float32, rows int, w *tensor.Matrix) error {
	if err := linalg.CheckDims(y, x, rows, w); err != nil {
		return err
	}
	if rows == 0 || w.Rows == 0 {
		return nil
	}
	if w.Cols == 0 {
		clear(y)
		return nil
	}
	d := m.Dev
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.weight(w)
	if err != nil {
		return err
	}
	return d.callLocked("matmul", func() int { return cMatMul(y, x, rows, w.Cols, w.Rows, p) })
}

// MatMulF32 is linalg.MatMuler on the GPU in fp32: W is widened to fp32
// (once, then resident until the Device closes), x stays fp32, and cuBLAS
// runs the pedantic fp32 compute type, so no TF32 or bf16 step rounds
// anything. It is the matmul of the "cuda-fp32" reference backend.
type MatMulF32 struct{ Dev *Device }

var _ linalg.MatMuler = MatMulF32{}

// Precision is fp32 (no TF32 or bf16 step).
func (MatMulF32) Precision() model.Precision { return model.PrecisionF32 }

// MatMulT implements linalg.MatMuler.
func (m MatMulF32) MatMulT(y, x []float32, rows int, w *tensor.Matrix) error {
	if err := linalg.CheckDims(y, x, rows, w); err != nil {
		return err
	}
	if rows == 0 || w.Rows == 0 {
		return nil
	}
	if w.Cols == 0 {
		clear(y)
		return nil
	}
	d := m.Dev
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.wideWeight(w)
	if err != nil {
		return err
	}
	return d.callLocked("matmul_f32", func() int { return cMatMulF32(y, x, rows, w.Cols, w.Rows, p) })
}

// RMSNorm computes y = x·rsqrt(mean(x²)+eps)·s over rows of n, with s = 1+w
// when onePlus (Qwen's zero-centred norms) and s = w otherwise.
func (d *Device) RMSNorm(y, x []float32, rows, n int, w []float32, eps float32, onePlus bool) error {
	if rows < 0 || n <= 0 || len(x) != rows*n || len(y) != rows*n || len(w) != n {
		return fmt.Errorf("cuda: rmsnorm: bad lengths for %d rows of %d", rows, n)
	}
	return d.call("rmsnorm", func() int { return cRMSNorm(y, x, rows, n, w, eps, onePlus) })
}

// GatedRMSNorm computes y = w·(x·rsqrt(mean(x²)+eps))·SiLU(z) over the heads
// rows of n of each of t tokens (x, z, y [t, heads·n]: the GDN output norm).
// With bf16 the inputs are rounded to bf16 and the layer's bf16 kernel runs,
// as prefill and decode run it; otherwise it is fp32 throughout.
func (d *Device) GatedRMSNorm(y, x, z []float32, t, heads, n int, w []float32, eps float32, bf16 bool) error {
	m := t * heads * n
	if t < 0 || heads <= 0 || n <= 0 || len(x) != m || len(z) != m || len(y) != m || len(w) != n {
		return fmt.Errorf("cuda: gated rmsnorm: bad lengths for %d tokens of %d heads of %d", t, heads, n)
	}
	return d.call("gated_rmsnorm", func() int { return cGatedRMSNorm(y, x, z, t, heads, n, w, eps, bf16) })
}

// RoPE rotates x [t, heads, dim] in place: the first rot dims of each head,
// rotate-half pairs (i, i+rot/2), at angle pos[t]·theta^(−2i/rot) computed
// in fp32 as transformers does.
func (d *Device) RoPE(x []float32, pos []int32, t, heads, dim, rot int, theta float32) error {
	if t < 0 || heads <= 0 || dim <= 0 || rot <= 0 || rot > dim || rot%2 != 0 || len(x) != t*heads*dim ||
		len(pos) != t {
		return fmt.Errorf("cuda: rope: bad dims t=%d heads=%d dim=%d rot=%d", t, heads, dim, rot)
	}
	return d.call("rope", func() int { return cRoPE(x, pos, t, heads, dim, rot, theta) })
}

// SwiGLU computes y = SiLU(gate)·up elementwise.
func (d *Device) SwiGLU(y, gate, up []float32) error {
	if len(gate) != len(y) || len(up) != len(y) {
		return fmt.Errorf("cuda: swiglu: lengths %d, %d, %d differ", len(y), len(gate), len(up))
	}
	return d.call("swiglu", func() int { return cSwiGLU(y, gate, up) })
}

// GDNLayer runs one whole Gated DeltaNet layer on the GPU: out [t, H] from
// the input-normed x [t, H], reading and advancing st exactly as
// gateddelta.Layer.Forward does. Weights and activations are bf16 on the
// device (fp32 accumulation), gates and the recurrent state fp32; t == 1
// takes the decode path (GEMV + recurrent update), t > 1 the prefill path
// (cuBLAS + the tensor-core chunked core; dk = dv = 128 for that core, other
// head dims fall back to the recurrence). The weights are uploaded per call:
// this entry is for verification.
func (d *Device) GDNLayer(out, x []float32, t int, dims gateddelta.LayerDims, w *gateddelta.LayerWeights,
	st *gateddelta.State) error {
	c, hv := dims.ConvDim(), dims.NV*dims.DV
	switch {
	case t < 0 || dims.Hidden <= 0 || dims.NK <= 0 || dims.NV <= 0 || dims.NV%dims.NK != 0 || dims.DK <= 0 ||
		dims.DV <= 0 || dims.ConvK <= 0 || dims.ConvK > 8:
		return fmt.Errorf("cuda: gdn layer: bad dims %+v", dims)
	case len(x) != t*dims.Hidden || len(out) != t*dims.Hidden:
		return fmt.Errorf("cuda: gdn layer: x has %d and out %d values, want %d", len(x), len(out), t*dims.Hidden)
	case len(st.Conv) != dims.ConvK*c || len(st.S) != dims.NV*dims.DK*dims.DV:
		return fmt.Errorf("cuda: gdn layer: state sizes %d, %d do not match %+v", len(st.Conv), len(st.S), dims)
	case len(w.ConvW) != c*dims.ConvK || len(w.ALog) != dims.NV || len(w.DtBias) != dims.NV ||
		len(w.NormW) != dims.DV:
		return fmt.Errorf("cuda: gdn layer: vector weight sizes do not match %+v", dims)
	}
	for _, m := range []struct {
		name       string
		w          *tensor.Matrix
		rows, cols int
	}{
		{"InProjQKV", w.InProjQKV, c, dims.Hidden}, {"InProjZ", w.InProjZ, hv, dims.Hidden},
		{"InProjB", w.InProjB, dims.NV, dims.Hidden}, {"InProjA", w.InProjA, dims.NV, dims.Hidden},
		{"out_proj", w.OutProj, dims.Hidden, hv},
	} {
		if m.w == nil || m.w.Rows != m.rows || m.w.Cols != m.cols {
			return fmt.Errorf("cuda: gdn layer: %s is not [%d,%d]", m.name, m.rows, m.cols)
		}
	}
	win := make([]uint16, 0, (c+hv+2*dims.NV)*dims.Hidden)
	for _, m := range []*tensor.Matrix{w.InProjQKV, w.InProjZ, w.InProjB, w.InProjA} {
		win = appendBF16(win, m)
	}
	wout := appendBF16(nil, w.OutProj)
	return d.call("gdn_layer", func() int {
		return cGDNLayer(out, x, t, dims, win, wout, w.ConvW, w.ALog, w.DtBias, w.NormW, st.Conv, st.S)
	})
}

// appendBF16 appends m's values as bf16 bit patterns (rounding F32 storage).
func appendBF16(dst []uint16, m *tensor.Matrix) []uint16 {
	if m.IsBF16() {
		return append(dst, m.BF16...)
	}
	for _, v := range m.F32 {
		dst = append(dst, tensor.Float32ToBF16(v))
	}
	return dst
}
