package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/layers/attention"
	"github.com/qwenref/qwenref/layers/conv1d"
	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
)

// The tests need a GPU and the library. Without them they skip, unless
// QWENREF_CUDA_REQUIRE is set (scripts/gpu-check remote sets it), when a
// missing device fails the run.
var (
	dev    *Device
	devErr error
)

func TestMain(m *testing.M) {
	dev, devErr = Open()
	if devErr != nil && os.Getenv("QWENREF_CUDA_REQUIRE") != "" {
		fmt.Fprintln(os.Stderr, "cuda: device required but not available:", devErr)
		os.Exit(1)
	}
	if dev != nil {
		fmt.Fprintln(os.Stderr, "cuda: testing on", dev.Name())
	}
	code := m.Run()
	if dev != nil {
		if err := dev.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "cuda: close:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func need(t *testing.T) *Device {
	t.Helper()
	if dev == nil {
		t.Skipf("no CUDA device: %v", devErr)
	}
	return dev
}

// uniform returns n values in [lo, hi): tests never run on zeros.
func uniform(r *rand.Rand, n int, lo, hi float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = lo + (hi-lo)*r.Float32()
	}
	return s
}

func nans(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

func widen(s []float32) []float64 {
	d := make([]float64, len(s))
	for i, v := range s {
		d[i] = float64(v)
	}
	return d
}

func narrow(s []float64) []float32 {
	d := make([]float32, len(s))
	for i, v := range s {
		d[i] = float32(v)
	}
	return d
}

func roundBF16(s []float32) []float32 {
	d := make([]float32, len(s))
	for i, v := range s {
		d[i] = tensor.BF16ToFloat32(tensor.Float32ToBF16(v))
	}
	return d
}

// check compares got with want by relative L2, logs the figure (the
// gpu-check summary greps these lines) and fails above tol.
func check(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	rel := tensor.RelL2(got, want)
	t.Logf("relL2 %-44s %.3g (max |Δ| %.3g, tol %.0e)", what, rel, tensor.MaxAbsDiff(got, want), tol)
	if !(rel <= tol) {
		t.Errorf("%s: relative L2 %.3g > %.0e", what, rel, tol)
	}
}

func TestConvMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ t, ch, k int }{{1, 64, 4}, {7, 24, 2}, {300, 1024, 4}, {129, 40, 6}, {64, 8, 8}} {
		x := uniform(r, c.t*c.ch, -2, 2)
		w := uniform(r, c.ch*c.k, -0.7, 0.7)
		st0 := uniform(r, c.k*c.ch, -1, 1)
		want, wantSt := make([]float32, c.t*c.ch), append([]float32(nil), st0...)
		if err := (conv1d.Naive{}).Forward(want, x, w, conv1d.Dims{T: c.t, C: c.ch, K: c.k}, wantSt); err != nil {
			t.Fatal(err)
		}
		got, gotSt := nans(c.t*c.ch), append([]float32(nil), st0...)
		if err := (Conv{d}).Forward(got, x, w, conv1d.Dims{T: c.t, C: c.ch, K: c.k}, gotSt); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("conv T=%d C=%d K=%d", c.t, c.ch, c.k)
		check(t, name+" y", got, want, 1e-5)
		check(t, name+" state", gotSt, wantSt, 0)
	}
}

// ConvShapes names the bf16 conv's launch shapes (100·U + TT: U rows in
// flight, or U = 8/9 for the all-loads-first form with and without
// streaming hints; TT steps a thread).
var convShapes = []int{0, 101, 116, 164, 216, 416, 464, 816, 916}

// Every bf16 conv launch shape against the plain form, bit for bit, with an
// initial state (the library's bench checks each run it times that way), at
// lengths that are and are not multiples of each shape's steps. The plain
// form is checked against the CPU by the model tests.
func TestConvShapesAgree(t *testing.T) {
	d := need(t)
	for _, T := range []int{1, 3, 37, 1000, 4096} {
		for _, v := range convShapes {
			if _, err := d.Bench(BenchConv, T, v, 1); err != nil {
				t.Errorf("conv T=%d shape %d: %v", T, v, err)
			}
		}
	}
	for _, v := range []int{808, 932, 1016} {
		if _, err := d.Bench(BenchConv, 100, v, 1); err == nil {
			t.Errorf("conv shape %d (not built) accepted", v)
		}
	}
}

// gdnScanShapes are the tensor-core scan's launch shapes (warps · 100 +
// value block, csrc/gdn_chunk.cu).
var gdnScanShapes = []int{432, 832, 864}

// TestGDNScanShapesAgree runs the bf16 chunked core with every scan shape on
// the same inputs and state: each warp sums in the same order whatever the
// shape, so outputs and states must be equal bit for bit (the 432 shape is
// checked against the naive rule by TestGatedDeltaMatchesCPU); an unbuilt
// shape is refused.
func TestGDNScanShapesAgree(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(41, 42))
	for _, dims := range []gateddelta.Dims{{T: 150, NK: 2, NV: 6, DK: 128, DV: 128}, {T: 1000, NK: 1, NV: 3, DK: 128, DV: 128}} {
		q, k, v, g, beta, st0 := gdnInputs(r, dims)
		var want, wantSt []float32
		for _, sh := range gdnScanShapes {
			out, st := make([]float32, dims.T*dims.NV*dims.DV), slices.Clone(st0)
			if err := (GatedDelta{d, GDNVariant(sh)}).Forward(out, q, k, v, g, beta, dims, st); err != nil {
				t.Fatalf("shape %d %+v: %v", sh, dims, err)
			}
			if want == nil {
				want, wantSt = out, st
				continue
			}
			if !slices.Equal(out, want) || !slices.Equal(st, wantSt) {
				t.Errorf("T=%d: shape %d differs from %d: out relL2 %.3g, state relL2 %.3g", dims.T, sh, gdnScanShapes[0],
					tensor.RelL2(out, want), tensor.RelL2(st, wantSt))
			}
		}
	}
	dims := gateddelta.Dims{T: 8, NK: 1, NV: 1, DK: 128, DV: 128}
	q, k, v, g, beta, st := gdnInputs(r, dims)
	for _, sh := range []int{416, 864 + 1, 1664} {
		if err := (GatedDelta{d, GDNVariant(sh)}).Forward(make([]float32, 8*128), q, k, v, g, beta, dims, st); err == nil {
			t.Errorf("scan shape %d (not built) accepted", sh)
		}
	}
}

// gdnInputs draws a valid gated-delta-rule call: unit q/k rows (q scaled),
// log-decays spread over [-4.5, -0.05], β in (0.05, 0.95), a random state.
func gdnInputs(r *rand.Rand, d gateddelta.Dims) (q, k, v, g, beta, st []float32) {
	q = uniform(r, d.T*d.NK*d.DK, -1, 1)
	k = uniform(r, d.T*d.NK*d.DK, -1, 1)
	for i := 0; i < d.T*d.NK; i++ {
		for j, s := range [][]float32{q[i*d.DK : (i+1)*d.DK], k[i*d.DK : (i+1)*d.DK]} {
			var ss float64
			for _, x := range s {
				ss += float64(x) * float64(x)
			}
			inv := float32(1 / math.Sqrt(ss+1e-6))
			if j == 0 {
				inv *= float32(1 / math.Sqrt(float64(d.DK)))
			}
			for n := range s {
				s[n] *= inv
			}
		}
	}
	v = uniform(r, d.T*d.NV*d.DV, -1, 1)
	g = uniform(r, d.T*d.NV, -3, 1.5)
	for i := range g {
		g[i] = -float32(math.Exp(float64(g[i])))
	}
	beta = uniform(r, d.T*d.NV, 0.05, 0.95)
	st = uniform(r, d.NV*d.DK*d.DV, -0.5, 0.5)
	return
}

func TestGatedDeltaMatchesCPU(t *testing.T) {
	dv := need(t)
	r := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		d        gateddelta.Dims
		variants []GDNVariant
	}{
		{gateddelta.Dims{T: 150, NK: 2, NV: 6, DK: 128, DV: 128}, []GDNVariant{ChunkF32, Recurrent, ChunkBF16, ScanWG}},
		{gateddelta.Dims{T: 70, NK: 2, NV: 4, DK: 16, DV: 24}, []GDNVariant{ChunkF32, Recurrent}},
		{gateddelta.Dims{T: 1, NK: 2, NV: 6, DK: 128, DV: 128}, []GDNVariant{ChunkF32, Recurrent, ChunkBF16, ScanWG}},
		{gateddelta.Dims{T: 64, NK: 1, NV: 2, DK: 128, DV: 128}, []GDNVariant{ChunkF32, ChunkBF16, ScanWG}},
		{gateddelta.Dims{T: 333, NK: 1, NV: 3, DK: 128, DV: 128}, []GDNVariant{ChunkBF16, ScanWG}},
	}
	for _, c := range cases {
		q, k, v, g, beta, st0 := gdnInputs(r, c.d)
		want, wantSt := make([]float32, c.d.T*c.d.NV*c.d.DV), append([]float32(nil), st0...)
		if err := (gateddelta.Naive{}).Forward(want, q, k, v, g, beta, c.d, wantSt); err != nil {
			t.Fatal(err)
		}
		for _, variant := range c.variants {
			got, gotSt := nans(len(want)), append([]float32(nil), st0...)
			err := (GatedDelta{dv, variant}).Forward(got, q, k, v, g, beta, c.d, gotSt)
			if variant == ScanWG && err != nil && strings.Contains(err.Error(), "not built for this device") {
				t.Logf("%v: %v", variant, err)
				continue
			}
			if err != nil {
				t.Fatalf("%v %+v: %v", variant, c.d, err)
			}
			tol := 1e-5
			if variant == ChunkBF16 || variant == ScanWG {
				tol = 1e-2
			}
			name := fmt.Sprintf("gdn %s T=%d nk=%d nv=%d dk=%d dv=%d", variant, c.d.T, c.d.NK, c.d.NV, c.d.DK, c.d.DV)
			check(t, name+" out", got, want, tol)
			check(t, name+" state", gotSt, wantSt, tol)
		}
	}
}

// TestGatedDeltaBF16VsFloat64 measures the tensor-core core against the
// float64 reference at a longer length (the figure to hold against fla's
// 4.2e-3 on bf16 inputs).
func TestGatedDeltaBF16VsFloat64(t *testing.T) {
	dv := need(t)
	r := rand.New(rand.NewPCG(5, 6))
	d := gateddelta.Dims{T: 1000, NK: 4, NV: 12, DK: 128, DV: 128}
	q, k, v, g, beta, st0 := gdnInputs(r, d)
	for i := range st0 {
		st0[i] = 0 // a fresh sequence, as fla's figure
	}
	ref := make([]float64, d.T*d.NV*d.DV)
	refSt := widen(st0)
	if err := reference.GatedDeltaRule(ref, widen(q), widen(k), widen(v), widen(g), widen(beta), d, refSt); err != nil {
		t.Fatal(err)
	}
	for _, variant := range []GDNVariant{ChunkBF16, ScanWG, ChunkF32} {
		got, gotSt := nans(len(ref)), append([]float32(nil), st0...)
		err := (GatedDelta{dv, variant}).Forward(got, q, k, v, g, beta, d, gotSt)
		if variant == ScanWG && err != nil && strings.Contains(err.Error(), "not built for this device") {
			t.Logf("%v: %v", variant, err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		tol := 1e-2
		if variant == ChunkF32 {
			tol = 1e-5
		}
		check(t, fmt.Sprintf("gdn %s T=1000 vs float64 out", variant), got, narrow(ref), tol)
		check(t, fmt.Sprintf("gdn %s T=1000 vs float64 state", variant), gotSt, narrow(refSt), tol)
	}
}

func TestAttentionMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, dd := range []attention.Dims{
		{T: 37, S: 100, NH: 6, NKV: 2, D: 64},
		{T: 64, S: 64, NH: 4, NKV: 1, D: 256},
		{T: 1, S: 50, NH: 24, NKV: 4, D: 256},
		{T: 5, S: 9, NH: 3, NKV: 3, D: 40},
	} {
		q := uniform(r, dd.T*dd.NH*dd.D, -1, 1)
		k := uniform(r, dd.S*dd.NKV*dd.D, -1, 1)
		v := uniform(r, dd.S*dd.NKV*dd.D, -1, 1)
		scale := float32(1 / math.Sqrt(float64(dd.D)))
		want := make([]float32, len(q))
		if err := (attention.Naive{}).Forward(want, q, k, v, dd, scale); err != nil {
			t.Fatal(err)
		}
		got := nans(len(q))
		if err := (Attention{d}).Forward(got, q, k, v, dd, scale); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("attention %+v", dd), got, want, 1e-5)
	}
}

// attentionInputs draws bf16-rounded attention inputs of head dim 256: q
// and gate for qRows (token, head) rows, q in ±peak, and k and v for
// kvRows (position, key head) rows.
func attentionInputs(r *rand.Rand, qRows, kvRows int, peak float32) (q, k, v, gate []float32) {
	const hd = 256
	q = roundBF16(uniform(r, qRows*hd, -peak, peak))
	k = roundBF16(uniform(r, kvRows*hd, -1, 1))
	v = roundBF16(uniform(r, kvRows*hd, -1, 1))
	gate = roundBF16(uniform(r, qRows*hd, -3, 3))
	return q, k, v, gate
}

// The device model's decode attention (keys split across blocks that loop
// over splits past one pass, a combine step, the sigmoid gate) against a
// float64 softmax attention on the same bf16-rounded inputs, at positions
// inside one split, across split edges and past one pass of the grid, with
// flat and peaked scores. Its output is bf16: rounding alone is ~1e-3.
func TestAttentionDecodeMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(17, 18))
	const hd = 256
	for _, c := range []struct{ nh, nkv, capacity, s int }{
		{24, 4, 8192, 1}, {24, 4, 8192, 3}, {24, 4, 8192, 64}, {24, 4, 8192, 65}, {24, 4, 8192, 2000},
		{24, 4, 8192, 2817}, {24, 4, 8192, 6000}, {24, 4, 8192, 8192}, {8, 2, 8192, 5000}, {6, 6, 100, 100},
	} {
		for _, peak := range []float32{1, 6} {
			q, k, v, gate := attentionInputs(r, c.nh, c.capacity*c.nkv, peak)
			want := gatedAttention(q, k, v, gate, 1, c.s-1, c.nh, c.nkv)
			got := nans(c.nh * hd)
			if err := d.attentionDecode(got, q, k, v, gate, c.s, c.capacity, c.nh, c.nkv); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("decode attention nh=%d nkv=%d S=%d of %d, q ±%g", c.nh, c.nkv, c.s, c.capacity, peak),
				got, narrow(want), 4e-3)
		}
	}
	if err := d.attentionDecode(nans(hd), nans(hd), nans(10*hd), nans(10*hd), nans(hd), 11, 10, 1, 1); err == nil {
		t.Error("11 keys in a cache of 10 accepted")
	}
}

// gatedAttention is the float64 causal GQA attention with the sigmoid output
// gate (head dim 256, scale 1/16): q and gate [t, nh, 256] at positions
// pos0.., k and v [≥ pos0+t, nkv, 256]; it returns [t, nh, 256].
func gatedAttention(q, k, v, gate []float32, t, pos0, nh, nkv int) []float64 {
	const hd = 256
	out := make([]float64, t*nh*hd)
	sc := make([]float64, pos0+t)
	for i := range t {
		s := pos0 + i + 1 // keys visible to query i
		for h := range nh {
			hk := h / (nh / nkv)
			qi := q[(i*nh+h)*hd:][:hd]
			mx := math.Inf(-1)
			for j := range s {
				kj := k[(j*nkv+hk)*hd:][:hd]
				dot := 0.0
				for e := range hd {
					dot += float64(qi[e]) * float64(kj[e])
				}
				sc[j] = dot / 16
				mx = max(mx, sc[j])
			}
			sum := 0.0
			for j := range s {
				sc[j] = math.Exp(sc[j] - mx)
				sum += sc[j]
			}
			o := out[(i*nh+h)*hd:][:hd]
			for j := range s {
				vj := v[(j*nkv+hk)*hd:][:hd]
				for e := range hd {
					o[e] += sc[j] * float64(vj[e])
				}
			}
			for e := range hd {
				o[e] = o[e] / sum / (1 + math.Exp(-float64(gate[(i*nh+h)*hd+e])))
			}
		}
	}
	return out
}

// The prefill flash attention in every launch shape the device holds
// against float64 sums of the same bf16-rounded inputs: tile edges (one row
// short of and past a tall block), continuations after cached keys, GQA
// groups of 6 and 4 and none, flat and peaked scores. Its output is bf16.
func TestFlashAttentionMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(23, 24))
	const hd = 256
	for _, c := range []struct{ t, pos0, nh, nkv int }{
		{1, 0, 24, 4}, {63, 0, 24, 4}, {129, 0, 24, 4}, {200, 57, 8, 2}, {257, 31, 6, 6}, {70, 130, 24, 4},
	} {
		for _, peak := range []float32{1, 6} {
			q, k, v, gate := attentionInputs(r, c.t*c.nh, (c.pos0+c.t)*c.nkv, peak)
			want := narrow(gatedAttention(q, k, v, gate, c.t, c.pos0, c.nh, c.nkv))
			for _, shape := range append([]int{0}, FlashShapes...) {
				got := nans(c.t * c.nh * hd)
				err := d.flashAttention(got, q, k, v, gate, c.t, c.pos0, c.nh, c.nkv, shape)
				if err != nil && shape != 0 && strings.Contains(err.Error(), "too large for this device") {
					t.Logf("shape %d: %v", shape, err)
					continue
				}
				if err != nil {
					t.Fatalf("shape %d: %v", shape, err)
				}
				check(t, fmt.Sprintf("flash attention shape %d t=%d pos0=%d nh=%d nkv=%d, q ±%g", shape, c.t, c.pos0,
					c.nh, c.nkv, peak), got, want, 4e-3)
			}
		}
	}
	if err := d.flashAttention(nans(hd), nans(hd), nans(hd), nans(hd), nans(hd), 1, 0, 1, 1, 999); err == nil {
		t.Error("flash attention shape 999 accepted")
	}
}

// The decode GEMV in each output mode against float64 sums of the same
// bf16-rounded inputs, at the widths decode runs (the one-row-per-warp form
// below n = 8192, two rows per warp above) and ragged ones. bf16 outputs
// carry their rounding (~1e-3); fp32 ones hold to 1e-5.
func TestGEMVMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(19, 20))
	bf := func(v float32) float64 { return float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(v))) }
	for _, c := range []struct{ n, k int }{{5120, 6144}, {16480, 5120}, {1000, 17408}, {8200, 512}, {8, 8}} {
		x := uniform(r, c.k, -1, 1)
		w := uniform(r, c.n*c.k, -0.05, 0.05)
		xb, wb := roundBF16(x), roundBF16(w) // as the device holds them
		dot := make([]float64, c.n)
		for i := range c.n {
			for j := range c.k {
				dot[i] += float64(wb[i*c.k+j]) * float64(xb[j])
			}
		}
		base := uniform(r, c.n, -1, 1)
		for _, m := range []struct {
			name string
			mode int
			tol  float64
		}{{"bf16", gemvBF16, 4e-3}, {"+= fp32", gemvAddF32, 1e-5}, {"fp32", gemvF32, 1e-5}, {"SwiGLU", gemvSwiGLU, 4e-3}} {
			ny := c.n
			if m.mode == gemvSwiGLU {
				ny = c.n / 2
			}
			want := make([]float64, ny)
			got := nans(ny)
			for i := range want {
				switch m.mode {
				case gemvAddF32:
					want[i] = float64(base[i]) + dot[i]
					got[i] = base[i]
				case gemvSwiGLU:
					g, u := bf(float32(dot[i])), bf(float32(dot[ny+i]))
					want[i] = g / (1 + math.Exp(-g)) * u
				default:
					want[i] = dot[i]
				}
			}
			if err := d.gemv(got, x, w, c.n, c.k, m.mode); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("gemv %s n=%d k=%d", m.name, c.n, c.k), got, narrow(want), m.tol)
		}
	}
}

func TestMatMulMatchesCPU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(9, 10))
	const m, k, n = 33, 320, 200
	x := uniform(r, m*k, -1, 1)
	wf := uniform(r, n*k, -0.1, 0.1)
	wb := make([]uint16, len(wf))
	for i, v := range wf {
		wb[i] = tensor.Float32ToBF16(v)
	}
	mb, _ := tensor.NewMatrixBF16(n, k, wb)
	mf, _ := tensor.NewMatrixF32(n, k, wf)
	for _, w := range []*tensor.Matrix{mb, mf, mb} { // mb twice: the second use hits the cache
		got := nans(m * n)
		if err := (MatMul{d}).MatMulT(got, x, m, w); err != nil {
			t.Fatal(err)
		}
		// Same bf16 operands on the CPU: only the summation order differs.
		want := make([]float32, m*n)
		if err := (linalg.Naive{}).MatMulT(want, roundBF16(x), m, mb); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("matmul bf16=%v vs bf16-rounded CPU", w.IsBF16()), got, want, 1e-5)
		exact := make([]float32, m*n)
		if err := (linalg.Naive{}).MatMulT(exact, x, m, mf); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("matmul bf16=%v vs fp32 CPU", w.IsBF16()), got, exact, 1e-2)
	}
	if c := d.CachedWeights(); c != 2 {
		t.Errorf("cached weights = %d, want 2", c)
	}
}

func TestNormsRoPESwiGLU(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(11, 12))
	// Many rows: the prefill form (a block per row, the row in registers as
	// float4) at full and partial float4 counts up to its n = 8192 limit,
	// and the element-wise form past it or for n not a multiple of 4. Then
	// single rows: the decode form (1024 threads, float4 loads) up to its
	// n = 16384 limit, and the widths that fall back.
	for _, sh := range [][2]int{{37, 256}, {64, 2048}, {9, 5120}, {5, 2560}, {4, 1000}, {3, 8192}, {3, 8196}, {6, 5122},
		{1, 5120}, {1, 1024}, {1, 16384}, {1, 5122}, {1, 20000}} {
		rows, n := sh[0], sh[1]
		x := uniform(r, rows*n, -3, 3)
		w := uniform(r, n, -0.5, 0.5)
		for _, onePlus := range []bool{true, false} {
			want := make([]float32, rows*n)
			for i := 0; i < rows; i++ {
				var ss float64
				for _, v := range x[i*n : (i+1)*n] {
					ss += float64(v) * float64(v)
				}
				inv := 1 / math.Sqrt(ss/float64(n)+1e-6)
				for j := 0; j < n; j++ {
					s := float64(w[j])
					if onePlus {
						s += 1
					}
					want[i*n+j] = float32(float64(x[i*n+j]) * inv * s)
				}
			}
			got := nans(rows * n)
			if err := d.RMSNorm(got, x, rows, n, w, 1e-6, onePlus); err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("rmsnorm %d×%d onePlus=%v", rows, n, onePlus), got, want, 1e-5)
		}
	}
	// Gated RMSNorm: fp32, then the layer's bf16 form (16-byte lanes for n of
	// 64, 128 and 256, the scalar kernel for n = 96), 27B and decode widths.
	for _, c := range []struct {
		t, heads, n int
		bf16        bool
	}{{37, 1, 256, false}, {37, 1, 256, true}, {19, 48, 128, true}, {1, 48, 128, true}, {5, 3, 64, true},
		{11, 2, 96, true}, {300, 7, 128, true}} {
		rows, n := c.t*c.heads, c.n
		x, z := uniform(r, rows*n, -3, 3), uniform(r, rows*n, -4, 4)
		w := uniform(r, n, -0.5, 0.5)
		tol := 1e-5
		if c.bf16 { // the device rounds x and z to bf16, and its output
			x, z, tol = roundBF16(x), roundBF16(z), 3e-3
		}
		want := make([]float32, rows*n)
		for i := 0; i < rows; i++ {
			var ss float64
			for _, v := range x[i*n : (i+1)*n] {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(n)+1e-6)
			for j := 0; j < n; j++ {
				zz := float64(z[i*n+j])
				want[i*n+j] = float32(float64(w[j]) * float64(x[i*n+j]) * inv * zz / (1 + math.Exp(-zz)))
			}
		}
		got := nans(rows * n)
		if err := d.GatedRMSNorm(got, x, z, c.t, c.heads, n, w, 1e-6, c.bf16); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("gated rmsnorm %d×%d×%d bf16=%v", c.t, c.heads, n, c.bf16), got, want, tol)
	}

	// RoPE: 24 heads of 256, rotary 64, θ = 1e7, positions up to ~500.
	const tt, heads, dim, rot = 19, 24, 256, 64
	xr := uniform(r, tt*heads*dim, -2, 2)
	pos := make([]int32, tt)
	for i := range pos {
		pos[i] = int32(r.IntN(500))
	}
	wantR := append([]float32(nil), xr...)
	for i := 0; i < tt; i++ {
		for h := 0; h < heads; h++ {
			row := wantR[(i*heads+h)*dim:]
			for p := 0; p < rot/2; p++ {
				inv := 1 / float32(math.Pow(1e7, float64(float32(2*p)/float32(rot))))
				ang := float64(float32(pos[i]) * inv)
				c, s := math.Cos(ang), math.Sin(ang)
				x1, x2 := float64(row[p]), float64(row[p+rot/2])
				row[p], row[p+rot/2] = float32(x1*c-x2*s), float32(x2*c+x1*s)
			}
		}
	}
	gotR := append([]float32(nil), xr...)
	if err := d.RoPE(gotR, pos, tt, heads, dim, rot, 1e7); err != nil {
		t.Fatal(err)
	}
	check(t, "rope rot=64 of 256", gotR, wantR, 1e-5)

	gate, up := uniform(r, 5000, -6, 6), uniform(r, 5000, -2, 2)
	wantS := make([]float32, len(gate))
	for i := range gate {
		gg := float64(gate[i])
		wantS[i] = float32(gg / (1 + math.Exp(-gg)) * float64(up[i]))
	}
	gotS := nans(len(gate))
	if err := d.SwiGLU(gotS, gate, up); err != nil {
		t.Fatal(err)
	}
	check(t, "swiglu", gotS, wantS, 1e-5)
}
