package cuda

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/qwenref/qwenref/internal/dl"
	"github.com/qwenref/qwenref/layers/gateddelta"
)

// abiVersion is QR_ABI_VERSION of csrc/qwenref_cuda.h: the library must
// report the same, or its functions may take other arguments.
const abiVersion = 13

// The library's entry points, bound with purego (dlopen and dlsym without
// cgo), so the package builds with no C compiler and no CUDA toolkit. The
// signatures mirror qwenref_cuda.h: int → int32, size_t → uintptr, pointers
// → unsafe.Pointer. Each returns the library's status code.
var lib struct {
	abiVersion      func() int32
	lastError       func() string
	deviceCount     func(n unsafe.Pointer) int32
	init            func(dev int32) int32
	shutdown        func() int32
	deviceInfo      func(name unsafe.Pointer, n int32, sm, ma, mi, mem unsafe.Pointer) int32
	free            func(p unsafe.Pointer) int32
	uploadBF16      func(pp, src unsafe.Pointer, n uintptr) int32
	uploadF32AsBF16 func(pp, src unsafe.Pointer, n uintptr) int32
	uploadF32       func(pp, src unsafe.Pointer, n uintptr) int32
	uploadBF16AsF32 func(pp, src unsafe.Pointer, n uintptr) int32
	matmulBF16      func(y, x unsafe.Pointer, m, k, n int32, w unsafe.Pointer) int32
	matmulF32       func(y, x unsafe.Pointer, m, k, n int32, w unsafe.Pointer) int32
	convForward     func(y, x unsafe.Pointer, t, c int32, w unsafe.Pointer, kw int32, st unsafe.Pointer) int32
	gdnForward      func(out, q, k, v, g, beta unsafe.Pointer, t, nk, nv, dk, dv int32, st unsafe.Pointer, variant int32) int32
	attnForward     func(out, q, k, v unsafe.Pointer, t, s, nh, nkv, d int32, scale float32) int32
	attnDecode      func(out, q, k, v, gate unsafe.Pointer, s, cap, nh, nkv int32) int32
	flashAttn       func(out, q, k, v, gate unsafe.Pointer, t, pos0, nh, nkv, variant int32) int32
	gemv            func(y, x, w unsafe.Pointer, n, k, mode int32) int32
	moeRoute        func(ids, w, logits unsafe.Pointer, t, e, k, norm int32) int32
	rmsnorm         func(y, x unsafe.Pointer, rows, n int32, w unsafe.Pointer, eps float32, onePlus int32) int32
	gatedRMSNorm    func(y, x, z unsafe.Pointer, t, heads, n int32, w unsafe.Pointer, eps float32, bf16 int32) int32
	rope            func(x, pos unsafe.Pointer, t, heads, d, rot int32, theta float32) int32
	swiglu          func(y, gate, up unsafe.Pointer, n uintptr) int32
	gdnLayer        func(out, x unsafe.Pointer, t int32, d, w, convState, recState unsafe.Pointer) int32
	bench           func(what, t, variant, reps int32, out unsafe.Pointer, nout int32) int32
	memInfo         func(free, total unsafe.Pointer) int32
	modelCreate     func(h, d, kinds unsafe.Pointer) int32
	modelDestroy    func(h unsafe.Pointer) int32
	modelRandom     func(h unsafe.Pointer, seed uint64) int32
	modelSet        func(h unsafe.Pointer, layer, which, part int32, src unsafe.Pointer, n uintptr, bf int32) int32
	modelGet        func(h unsafe.Pointer, layer, which, part int32, dst unsafe.Pointer, n uintptr) int32
	modelReset      func(h unsafe.Pointer) int32
	modelForward    func(h, ids unsafe.Pointer, t, last int32, logits unsafe.Pointer) int32
	modelLastMs     func(h, ms unsafe.Pointer) int32
	modelRows       func(h unsafe.Pointer, rows int32) int32
	modelFwdRows    func(h, ids unsafe.Pointer, rows, t, last int32, logits unsafe.Pointer) int32
	modelGreedy     func(h unsafe.Pointer, first int32, n int32, out unsafe.Pointer) int32
	modelInfo       func(h, pos, w, s, a unsafe.Pointer) int32
	modelBench      func(h unsafe.Pointer, what, t, variant, reps int32, out unsafe.Pointer, nout int32) int32
	modelStageName  func(i int32) string
	modelTrace      func(h unsafe.Pointer, on int32) int32
	modelTraceOnly  func(h, names unsafe.Pointer) int32
	modelLayer      func(h unsafe.Pointer, layer int32, x unsafe.Pointer, t int32, out unsafe.Pointer) int32
	modelTraceCount func(h, n unsafe.Pointer) int32
	modelTraceEntry func(h unsafe.Pointer, i int32, name unsafe.Pointer, nameLen int32, dims, dst unsafe.Pointer, n uintptr) int32
	modelPlan       func(h, steps unsafe.Pointer, n int32, names unsafe.Pointer, namesLen uintptr) int32
}

// symbols pairs each binding with its C name.
func symbols() []struct {
	fn   any
	name string
} {
	l := &lib
	return []struct {
		fn   any
		name string
	}{
		{&l.abiVersion, "qr_abi_version"}, {&l.lastError, "qr_last_error"}, {&l.deviceCount, "qr_device_count"},
		{&l.init, "qr_init"}, {&l.shutdown, "qr_shutdown"}, {&l.deviceInfo, "qr_device_info"},
		{&l.free, "qr_free"}, {&l.uploadBF16, "qr_upload_bf16"}, {&l.uploadF32AsBF16, "qr_upload_f32_as_bf16"},
		{&l.uploadF32, "qr_upload_f32"}, {&l.uploadBF16AsF32, "qr_upload_bf16_as_f32"}, {&l.matmulBF16, "qr_matmul_bf16"}, {&l.matmulF32, "qr_matmul_f32"},
		{&l.convForward, "qr_conv_forward"}, {&l.gdnForward, "qr_gdn_forward"},
		{&l.attnForward, "qr_attention_forward"}, {&l.attnDecode, "qr_attention_decode"}, {&l.flashAttn, "qr_flash_attention"}, {&l.gemv, "qr_gemv"}, {&l.moeRoute, "qr_moe_route"}, {&l.rmsnorm, "qr_rmsnorm"}, {&l.gatedRMSNorm, "qr_gated_rmsnorm"},
		{&l.rope, "qr_rope"}, {&l.swiglu, "qr_swiglu"}, {&l.gdnLayer, "qr_gdn_layer"}, {&l.bench, "qr_bench"},
		{&l.memInfo, "qr_mem_info"}, {&l.modelCreate, "qr_model_create"}, {&l.modelDestroy, "qr_model_destroy"},
		{&l.modelRandom, "qr_model_random"}, {&l.modelSet, "qr_model_set"}, {&l.modelGet, "qr_model_get"},
		{&l.modelReset, "qr_model_reset"}, {&l.modelForward, "qr_model_forward"}, {&l.modelLastMs, "qr_model_last_ms"},
		{&l.modelGreedy, "qr_model_greedy"}, {&l.modelInfo, "qr_model_info"}, {&l.modelBench, "qr_model_bench"},
		{&l.modelStageName, "qr_model_stage_name"}, {&l.modelTrace, "qr_model_trace"}, {&l.modelTraceOnly, "qr_model_trace_only"}, {&l.modelLayer, "qr_model_layer"},
		{&l.modelTraceCount, "qr_model_trace_count"}, {&l.modelTraceEntry, "qr_model_trace_entry"},
		{&l.modelPlan, "qr_model_plan"}, {&l.modelRows, "qr_model_rows"}, {&l.modelFwdRows, "qr_model_forward_rows"},
	}
}

var (
	loadOnce sync.Once
	loadErr  error
)

// load finds the driver, cuBLAS and the kernel library (find.go), opens
// them once per process (CUDA keeps process-wide state, so nothing is ever
// closed) and binds every entry point.
func load() error {
	loadOnce.Do(func() { loadErr = loadLibrary() })
	return loadErr
}

func loadLibrary() error {
	path, err := prepareLibrary()
	if err != nil {
		return err
	}
	h, err := dl.Open(path, dl.Now|dl.Local)
	if err != nil {
		return fmt.Errorf("cuda: cannot load %s: %v", path, err)
	}
	for _, s := range symbols() {
		if _, err := dl.Sym(h, s.name); err != nil {
			return fmt.Errorf("cuda: %s lacks %s (an older build? this package wants ABI %d): %v", path, s.name, abiVersion, err)
		}
		purego.RegisterLibFunc(s.fn, h, s.name)
	}
	if v := lib.abiVersion(); v != abiVersion {
		return fmt.Errorf("cuda: %s has ABI version %d, this package wants %d (rebuild it with make -C cuda)", path, v, abiVersion)
	}
	return nil
}

// Pointer helpers: the first element of a slice, or nil for an empty one
// (the library reads no elements then).
func fptr(s []float32) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

func u16ptr(s []uint16) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

func i32ptr(s []int32) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// The Go side of the C ABI: one function per library entry, returning the
// status code as an int.

func cLastError() string { return lib.lastError() }
func cInit(dev int) int  { return int(lib.init(int32(dev))) }
func cShutdown() int     { return int(lib.shutdown()) }

func cDeviceCount() (n int, rc int) {
	var c int32
	rc = int(lib.deviceCount(unsafe.Pointer(&c)))
	return int(c), rc
}

func cDeviceInfo() (name string, sms, major, minor int, mem int64, rc int) {
	buf := make([]byte, 256)
	var s, ma, mi int32
	var m uintptr
	rc = int(lib.deviceInfo(unsafe.Pointer(&buf[0]), int32(len(buf)), unsafe.Pointer(&s), unsafe.Pointer(&ma),
		unsafe.Pointer(&mi), unsafe.Pointer(&m)))
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), int(s), int(ma), int(mi), int64(m), rc
}

func cFree(p unsafe.Pointer) int { return int(lib.free(p)) }

func cUploadBF16(p *unsafe.Pointer, src []uint16) int {
	return int(lib.uploadBF16(unsafe.Pointer(p), u16ptr(src), uintptr(len(src))))
}

func cUploadF32AsBF16(p *unsafe.Pointer, src []float32) int {
	return int(lib.uploadF32AsBF16(unsafe.Pointer(p), fptr(src), uintptr(len(src))))
}

func cUploadF32(p *unsafe.Pointer, src []float32) int {
	return int(lib.uploadF32(unsafe.Pointer(p), fptr(src), uintptr(len(src))))
}

func cUploadBF16AsF32(p *unsafe.Pointer, src []uint16) int {
	return int(lib.uploadBF16AsF32(unsafe.Pointer(p), u16ptr(src), uintptr(len(src))))
}

func cMatMul(y, x []float32, m, k, n int, w unsafe.Pointer) int {
	return int(lib.matmulBF16(fptr(y), fptr(x), int32(m), int32(k), int32(n), w))
}

func cMatMulF32(y, x []float32, m, k, n int, w unsafe.Pointer) int {
	return int(lib.matmulF32(fptr(y), fptr(x), int32(m), int32(k), int32(n), w))
}

func cConv(y, x []float32, t, c int, w []float32, kw int, state []float32) int {
	return int(lib.convForward(fptr(y), fptr(x), int32(t), int32(c), fptr(w), int32(kw), fptr(state)))
}

func cGDN(out, q, k, v, g, beta []float32, d gateddelta.Dims, state []float32, variant int) int {
	return int(lib.gdnForward(fptr(out), fptr(q), fptr(k), fptr(v), fptr(g), fptr(beta), int32(d.T), int32(d.NK),
		int32(d.NV), int32(d.DK), int32(d.DV), fptr(state), int32(variant)))
}

func cAttention(out, q, k, v []float32, t, s, nh, nkv, d int, scale float32) int {
	return int(lib.attnForward(fptr(out), fptr(q), fptr(k), fptr(v), int32(t), int32(s), int32(nh), int32(nkv),
		int32(d), scale))
}

func cAttentionDecode(out, q, k, v, gate []float32, s, capacity, nh, nkv int) int {
	return int(lib.attnDecode(fptr(out), fptr(q), fptr(k), fptr(v), fptr(gate), int32(s), int32(capacity), int32(nh),
		int32(nkv)))
}

func cFlashAttention(out, q, k, v, gate []float32, t, pos0, nh, nkv, variant int) int {
	return int(lib.flashAttn(fptr(out), fptr(q), fptr(k), fptr(v), fptr(gate), int32(t), int32(pos0), int32(nh),
		int32(nkv), int32(variant)))
}

func cGEMV(y, x, w []float32, n, k, mode int) int {
	return int(lib.gemv(fptr(y), fptr(x), fptr(w), int32(n), int32(k), int32(mode)))
}

func cMoERoute(ids []int32, w, logits []float32, t, e, k int, norm bool) int {
	return int(lib.moeRoute(i32ptr(ids), fptr(w), fptr(logits), int32(t), int32(e), int32(k), b2i(norm)))
}

func cRMSNorm(y, x []float32, rows, n int, w []float32, eps float32, onePlus bool) int {
	return int(lib.rmsnorm(fptr(y), fptr(x), int32(rows), int32(n), fptr(w), eps, b2i(onePlus)))
}

func cGatedRMSNorm(y, x, z []float32, t, heads, n int, w []float32, eps float32, bf16 bool) int {
	return int(lib.gatedRMSNorm(fptr(y), fptr(x), fptr(z), int32(t), int32(heads), int32(n), fptr(w), eps, b2i(bf16)))
}

func cRoPE(x []float32, pos []int32, t, heads, d, rot int, theta float32) int {
	return int(lib.rope(fptr(x), i32ptr(pos), int32(t), int32(heads), int32(d), int32(rot), theta))
}

func cSwiGLU(y, gate, up []float32) int {
	return int(lib.swiglu(fptr(y), fptr(gate), fptr(up), uintptr(len(y))))
}

// gdnDims and gdnWeights mirror qr_gdn_dims and qr_gdn_weights.
type gdnDims struct {
	hidden, nk, nv, dk, dv, kconv int32
	eps                           float32
}

type gdnWeights struct {
	win, wout, conv, alog, dtb, normw unsafe.Pointer
}

// cGDNLayer passes the weight slices inside a C struct; Go's collector does
// not move heap objects, and the slices stay referenced for the call.
func cGDNLayer(out, x []float32, t int, d gateddelta.LayerDims, win, wout []uint16, conv, alog, dtb, normw []float32,
	convState, recState []float32) int {
	cd := &gdnDims{int32(d.Hidden), int32(d.NK), int32(d.NV), int32(d.DK), int32(d.DV), int32(d.ConvK), d.Eps}
	cw := &gdnWeights{u16ptr(win), u16ptr(wout), fptr(conv), fptr(alog), fptr(dtb), fptr(normw)}
	rc := lib.gdnLayer(fptr(out), fptr(x), int32(t), unsafe.Pointer(cd), unsafe.Pointer(cw), fptr(convState), fptr(recState))
	keep(win, wout, conv, alog, dtb, normw)
	return int(rc)
}

// keep holds its arguments live until the call it follows has returned.
//
//go:noinline
func keep(...any) {}

func cBench(what, t, variant, reps int, out []float64) int {
	return int(lib.bench(int32(what), int32(t), int32(variant), int32(reps), unsafe.Pointer(&out[0]), int32(len(out))))
}

func cMemInfo() (free, total int64, rc int) {
	var f, t uintptr
	rc = int(lib.memInfo(unsafe.Pointer(&f), unsafe.Pointer(&t)))
	return int64(f), int64(t), rc
}

// modelDims mirrors qr_model_dims (int and float fields, C order).
type modelDims struct {
	vocab, hidden, inter, nlayers int32
	nk, nv, dk, dv, kconv         int32
	nh, nkv, hd, rot              int32
	theta, eps                    float32
	maxTokens                     int32
	experts, topk                 int32 // MoE (0: a dense model)
	moeInter, sharedInter         int32
	normTopK                      int32
	f32                           int32 // 1: the fp32 model (cuda-fp32)
}

func cModelCreate(h *unsafe.Pointer, d modelDims, kinds []int32) int {
	dp := &d
	return int(lib.modelCreate(unsafe.Pointer(h), unsafe.Pointer(dp), i32ptr(kinds)))
}

func cModelDestroy(h unsafe.Pointer) int             { return int(lib.modelDestroy(h)) }
func cModelRandom(h unsafe.Pointer, seed uint64) int { return int(lib.modelRandom(h, seed)) }
func cModelReset(h unsafe.Pointer) int               { return int(lib.modelReset(h)) }

func cModelSetF32(h unsafe.Pointer, layer, which, part int, v []float32) int {
	return int(lib.modelSet(h, int32(layer), int32(which), int32(part), fptr(v), uintptr(len(v)), 0))
}

func cModelSetBF16(h unsafe.Pointer, layer, which, part int, v []uint16) int {
	return int(lib.modelSet(h, int32(layer), int32(which), int32(part), u16ptr(v), uintptr(len(v)), 1))
}

// cModelForward feeds ids; logits nil asks for none (nothing is copied back).
func cModelForward(h unsafe.Pointer, ids []int32, lastOnly bool, logits []float32) int {
	return int(lib.modelForward(h, i32ptr(ids), int32(len(ids)), b2i(lastOnly), fptr(logits)))
}

func cModelRows(h unsafe.Pointer, rows int) int { return int(lib.modelRows(h, int32(rows))) }

// cModelForwardRows feeds ids [rows, t] (flat); logits nil asks for none.
func cModelForwardRows(h unsafe.Pointer, ids []int32, rows, t int, lastOnly bool, logits []float32) int {
	return int(lib.modelFwdRows(h, i32ptr(ids), int32(rows), int32(t), b2i(lastOnly), fptr(logits)))
}

func cModelLastMs(h unsafe.Pointer) (float32, int) {
	var ms float32
	rc := int(lib.modelLastMs(h, unsafe.Pointer(&ms)))
	return ms, rc
}

func cModelGreedy(h unsafe.Pointer, first int32, out []int32) int {
	return int(lib.modelGreedy(h, first, int32(len(out)), i32ptr(out)))
}

func cModelInfo(h unsafe.Pointer) (pos int, w, s, a int64, rc int) {
	var p int32
	var cw, cs, ca uintptr
	rc = int(lib.modelInfo(h, unsafe.Pointer(&p), unsafe.Pointer(&cw), unsafe.Pointer(&cs), unsafe.Pointer(&ca)))
	return int(p), int64(cw), int64(cs), int64(ca), rc
}

func cModelBench(h unsafe.Pointer, what, t, variant, reps int, out []float64) int {
	return int(lib.modelBench(h, int32(what), int32(t), int32(variant), int32(reps), unsafe.Pointer(&out[0]),
		int32(len(out))))
}

func cModelStageName(i int) string { return lib.modelStageName(int32(i)) }

func cModelGetBF16(h unsafe.Pointer, layer, which, part int, dst []uint16) int {
	return int(lib.modelGet(h, int32(layer), int32(which), int32(part), u16ptr(dst), uintptr(len(dst))))
}

func cModelGetF32(h unsafe.Pointer, layer, which, part int, dst []float32) int {
	return int(lib.modelGet(h, int32(layer), int32(which), int32(part), fptr(dst), uintptr(len(dst))))
}

// stepRecords is QR_STEP_RECORDS: the most stages one step records.
const stepRecords = 6

// cStep mirrors qr_step: rec holds byte offsets into the plan's names, -1
// where a record slot is unused.
type cStep struct {
	op, layer, arg int32
	rec            [stepRecords]int32
}

func cModelPlan(h unsafe.Pointer, steps []cStep, names []byte) int {
	var sp unsafe.Pointer
	if len(steps) > 0 {
		sp = unsafe.Pointer(&steps[0])
	}
	var np unsafe.Pointer
	if len(names) > 0 {
		np = unsafe.Pointer(&names[0])
	}
	return int(lib.modelPlan(h, sp, int32(len(steps)), np, uintptr(len(names))))
}

func cModelTrace(h unsafe.Pointer, on bool) int { return int(lib.modelTrace(h, b2i(on))) }

// cModelTraceOnly limits the trace that is on to the named stages (none:
// every stage).
func cModelTraceOnly(h unsafe.Pointer, names []string) int {
	b := []byte(strings.Join(names, "\n") + "\x00")
	rc := int(lib.modelTraceOnly(h, unsafe.Pointer(&b[0])))
	runtime.KeepAlive(b)
	return rc
}

func cModelTraceCount(h unsafe.Pointer) (n int, rc int) {
	var c int32
	rc = int(lib.modelTraceCount(h, unsafe.Pointer(&c)))
	return int(c), rc
}

// cModelTraceEntry returns entry i's name and dims, and its values when
// dst is not nil (len(dst) must be their product).
func cModelTraceEntry(h unsafe.Pointer, i int, dst []float32) (name string, dims [3]int32, rc int) {
	buf := make([]byte, 128)
	rc = int(lib.modelTraceEntry(h, int32(i), unsafe.Pointer(&buf[0]), int32(len(buf)), unsafe.Pointer(&dims[0]),
		fptr(dst), uintptr(len(dst))))
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	return string(buf[:n]), dims, rc
}

func cModelLayer(h unsafe.Pointer, layer int, x []float32, t int, out []float32) int {
	return int(lib.modelLayer(h, int32(layer), fptr(x), int32(t), fptr(out)))
}
