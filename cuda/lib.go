//go:build cuda

package cuda

/*
#cgo CFLAGS: -I${SRCDIR}/csrc -O2
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "qwenref_cuda.h"

// The library is opened once per process and never closed: CUDA keeps
// process-wide state that outlives any one Device.
static void *qr_handle;

static const char *qr_names[] = {
	"qr_abi_version", "qr_last_error", "qr_init", "qr_shutdown", "qr_device_info",
	"qr_alloc", "qr_free", "qr_memcpy_h2d", "qr_memcpy_d2h", "qr_upload_bf16",
	"qr_upload_f32_as_bf16", "qr_matmul_bf16", "qr_conv_forward", "qr_gdn_forward",
	"qr_attention_forward", "qr_rmsnorm", "qr_gated_rmsnorm", "qr_rope", "qr_swiglu",
	"qr_gdn_layer", "qr_bench", "qr_mem_info", "qr_model_create", "qr_model_destroy",
	"qr_model_random", "qr_model_set", "qr_model_reset", "qr_model_forward", "qr_model_greedy",
	"qr_model_info", "qr_model_bench", "qr_model_stage_name", "qr_model_get",
};
#define QR_NSYM (int)(sizeof qr_names / sizeof qr_names[0])
static void *qr_sym[QR_NSYM];

// qr_load opens path and resolves every symbol; on failure it writes why.
static int qr_load(const char *path, char *err, int errlen) {
	if (qr_handle) return 0;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	for (int i = 0; i < QR_NSYM; i++) {
		qr_sym[i] = dlsym(h, qr_names[i]);
		if (!qr_sym[i]) {
			snprintf(err, errlen, "%s: missing symbol %s", path, qr_names[i]);
			dlclose(h);
			return -1;
		}
	}
	qr_handle = h;
	return 0;
}

// Trampolines: each casts the resolved pointer to the type the header
// declares (typeof of an undefined extern is fine: nothing links to it).
#define QR_FN(i, name) ((__typeof__(&name))qr_sym[i])
static int t_abi_version(void) { return QR_FN(0, qr_abi_version)(); }
static const char *t_last_error(void) { return QR_FN(1, qr_last_error)(); }
static int t_init(int dev) { return QR_FN(2, qr_init)(dev); }
static int t_shutdown(void) { return QR_FN(3, qr_shutdown)(); }
static int t_device_info(char *name, int n, int *sm, int *ma, int *mi, size_t *mem) {
	return QR_FN(4, qr_device_info)(name, n, sm, ma, mi, mem);
}
static int t_free(void *p) { return QR_FN(6, qr_free)(p); }
static int t_upload_bf16(void **p, const uint16_t *src, size_t n) { return QR_FN(9, qr_upload_bf16)(p, src, n); }
static int t_upload_f32_as_bf16(void **p, const float *src, size_t n) {
	return QR_FN(10, qr_upload_f32_as_bf16)(p, src, n);
}
static int t_matmul_bf16(float *y, const float *x, int m, int k, int n, const void *w) {
	return QR_FN(11, qr_matmul_bf16)(y, x, m, k, n, w);
}
static int t_conv_forward(float *y, const float *x, int t, int c, const float *w, int kw, float *st) {
	return QR_FN(12, qr_conv_forward)(y, x, t, c, w, kw, st);
}
static int t_gdn_forward(float *out, const float *q, const float *k, const float *v, const float *g,
                         const float *beta, int t, int nk, int nv, int dk, int dv, float *state, int variant) {
	return QR_FN(13, qr_gdn_forward)(out, q, k, v, g, beta, t, nk, nv, dk, dv, state, variant);
}
static int t_attention_forward(float *out, const float *q, const float *k, const float *v, int t, int s, int nh,
                               int nkv, int d, float scale) {
	return QR_FN(14, qr_attention_forward)(out, q, k, v, t, s, nh, nkv, d, scale);
}
static int t_rmsnorm(float *y, const float *x, int rows, int n, const float *w, float eps, int one_plus) {
	return QR_FN(15, qr_rmsnorm)(y, x, rows, n, w, eps, one_plus);
}
static int t_gated_rmsnorm(float *y, const float *x, const float *z, int rows, int n, const float *w, float eps) {
	return QR_FN(16, qr_gated_rmsnorm)(y, x, z, rows, n, w, eps);
}
static int t_rope(float *x, const int32_t *pos, int t, int heads, int d, int rot, float theta) {
	return QR_FN(17, qr_rope)(x, pos, t, heads, d, rot, theta);
}
static int t_swiglu(float *y, const float *gate, const float *up, size_t n) {
	return QR_FN(18, qr_swiglu)(y, gate, up, n);
}
static int t_gdn_layer(float *out, const float *x, int t, const qr_gdn_dims *d, const qr_gdn_weights *w,
                       float *conv_state, float *rec_state) {
	return QR_FN(19, qr_gdn_layer)(out, x, t, d, w, conv_state, rec_state);
}
static int t_bench(int what, int t, int variant, int reps, double *out, int nout) {
	return QR_FN(20, qr_bench)(what, t, variant, reps, out, nout);
}
static int t_mem_info(size_t *f, size_t *t) { return QR_FN(21, qr_mem_info)(f, t); }
static int t_model_create(void **m, const qr_model_dims *d, const int32_t *kinds) {
	return QR_FN(22, qr_model_create)(m, d, kinds);
}
static int t_model_destroy(void *m) { return QR_FN(23, qr_model_destroy)(m); }
static int t_model_random(void *m, uint64_t seed) { return QR_FN(24, qr_model_random)(m, seed); }
static int t_model_set(void *m, int layer, int which, const void *src, size_t n, int bf) {
	return QR_FN(25, qr_model_set)(m, layer, which, src, n, bf);
}
static int t_model_reset(void *m) { return QR_FN(26, qr_model_reset)(m); }
static int t_model_forward(void *m, const int32_t *ids, int t, int last, float *logits) {
	return QR_FN(27, qr_model_forward)(m, ids, t, last, logits);
}
static int t_model_greedy(void *m, int32_t first, int n, int32_t *out) {
	return QR_FN(28, qr_model_greedy)(m, first, n, out);
}
static int t_model_info(void *m, int *pos, size_t *w, size_t *s, size_t *a) {
	return QR_FN(29, qr_model_info)(m, pos, w, s, a);
}
static int t_model_bench(void *m, int what, int t, int variant, int reps, double *out, int nout) {
	return QR_FN(30, qr_model_bench)(m, what, t, variant, reps, out, nout);
}
static const char *t_model_stage_name(int i) { return QR_FN(31, qr_model_stage_name)(i); }
static int t_model_get(void *m, int layer, int which, void *dst, size_t n) {
	return QR_FN(32, qr_model_get)(m, layer, which, dst, n);
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/qwenref/qwenref/layers/gateddelta"
)

// LibraryName is the file name of the compiled kernels.
const LibraryName = "libqwenref_cuda.so"

// LibraryPath returns where Open looks for the library: $QWENREF_CUDA_LIB if
// set, else LibraryName next to the running executable if it exists there,
// else ./LibraryName.
func LibraryPath() string {
	if p := os.Getenv("QWENREF_CUDA_LIB"); p != "" {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), LibraryName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "./" + LibraryName
}

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens the library once per process.
func load() error {
	loadOnce.Do(func() {
		path := LibraryPath()
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var buf [512]C.char
		if C.qr_load(cpath, &buf[0], C.int(len(buf))) != 0 {
			loadErr = fmt.Errorf("cuda: cannot load %s: %s", path, C.GoString(&buf[0]))
			return
		}
		if v := int(C.t_abi_version()); v != int(C.QR_ABI_VERSION) {
			loadErr = fmt.Errorf("cuda: %s has ABI version %d, this package wants %d (rebuild the library)",
				path, v, int(C.QR_ABI_VERSION))
		}
	})
	return loadErr
}

// Pointer helpers: the first element of a slice as a C pointer, or nil for
// an empty slice (the library reads no elements then).
func fptr(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func u16ptr(s []uint16) *C.uint16_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint16_t)(unsafe.Pointer(&s[0]))
}

// The Go side of the C ABI: one function per library entry, returning the
// status code. Only this file imports "C".

func cLastError() string { return C.GoString(C.t_last_error()) }
func cInit(dev int) int  { return int(C.t_init(C.int(dev))) }
func cShutdown() int     { return int(C.t_shutdown()) }

func cDeviceInfo() (name string, sms, major, minor int, mem int64, rc int) {
	var buf [256]C.char
	var s, ma, mi C.int
	var m C.size_t
	rc = int(C.t_device_info(&buf[0], C.int(len(buf)), &s, &ma, &mi, &m))
	return C.GoString(&buf[0]), int(s), int(ma), int(mi), int64(m), rc
}

func cFree(p unsafe.Pointer) int { return int(C.t_free(p)) }

func cUploadBF16(p *unsafe.Pointer, src []uint16) int {
	return int(C.t_upload_bf16(p, u16ptr(src), C.size_t(len(src))))
}

func cUploadF32(p *unsafe.Pointer, src []float32) int {
	return int(C.t_upload_f32_as_bf16(p, fptr(src), C.size_t(len(src))))
}

func cMatMul(y, x []float32, m, k, n int, w unsafe.Pointer) int {
	return int(C.t_matmul_bf16(fptr(y), fptr(x), C.int(m), C.int(k), C.int(n), w))
}

func cConv(y, x []float32, t, c int, w []float32, kw int, state []float32) int {
	return int(C.t_conv_forward(fptr(y), fptr(x), C.int(t), C.int(c), fptr(w), C.int(kw), fptr(state)))
}

func cGDN(out, q, k, v, g, beta []float32, d gateddelta.Dims, state []float32, variant int) int {
	return int(C.t_gdn_forward(fptr(out), fptr(q), fptr(k), fptr(v), fptr(g), fptr(beta), C.int(d.T),
		C.int(d.NK), C.int(d.NV), C.int(d.DK), C.int(d.DV), fptr(state), C.int(variant)))
}

func cAttention(out, q, k, v []float32, t, s, nh, nkv, d int, scale float32) int {
	return int(C.t_attention_forward(fptr(out), fptr(q), fptr(k), fptr(v), C.int(t), C.int(s), C.int(nh),
		C.int(nkv), C.int(d), C.float(scale)))
}

func cRMSNorm(y, x []float32, rows, n int, w []float32, eps float32, onePlus bool) int {
	op := C.int(0)
	if onePlus {
		op = 1
	}
	return int(C.t_rmsnorm(fptr(y), fptr(x), C.int(rows), C.int(n), fptr(w), C.float(eps), op))
}

func cGatedRMSNorm(y, x, z []float32, rows, n int, w []float32, eps float32) int {
	return int(C.t_gated_rmsnorm(fptr(y), fptr(x), fptr(z), C.int(rows), C.int(n), fptr(w), C.float(eps)))
}

func cRoPE(x []float32, pos []int32, t, heads, d, rot int, theta float32) int {
	var pp *C.int32_t
	if len(pos) > 0 {
		pp = (*C.int32_t)(unsafe.Pointer(&pos[0]))
	}
	return int(C.t_rope(fptr(x), pp, C.int(t), C.int(heads), C.int(d), C.int(rot), C.float(theta)))
}

func cSwiGLU(y, gate, up []float32) int {
	return int(C.t_swiglu(fptr(y), fptr(gate), fptr(up), C.size_t(len(y))))
}

// cGDNLayer passes the weight slices inside a C struct, so they are pinned
// for the call (cgo forbids unpinned Go pointers inside Go memory passed to C).
func cGDNLayer(out, x []float32, t int, d gateddelta.LayerDims, win, wout []uint16, conv, alog, dtb, normw []float32,
	convState, recState []float32) int {
	var pin runtime.Pinner
	defer pin.Unpin()
	for _, p := range []unsafe.Pointer{unsafe.Pointer(&win[0]), unsafe.Pointer(&wout[0]), unsafe.Pointer(&conv[0]),
		unsafe.Pointer(&alog[0]), unsafe.Pointer(&dtb[0]), unsafe.Pointer(&normw[0])} {
		pin.Pin(p)
	}
	cd := C.qr_gdn_dims{hidden: C.int(d.Hidden), nk: C.int(d.NK), nv: C.int(d.NV), dk: C.int(d.DK), dv: C.int(d.DV),
		kconv: C.int(d.ConvK), eps: C.float(d.Eps)}
	cw := C.qr_gdn_weights{w_in: u16ptr(win), w_out: u16ptr(wout), conv_w: fptr(conv), a_log: fptr(alog),
		dt_bias: fptr(dtb), norm_w: fptr(normw)}
	return int(C.t_gdn_layer(fptr(out), fptr(x), C.int(t), &cd, &cw, fptr(convState), fptr(recState)))
}

func cBench(what, t, variant, reps int, out []float64) int {
	return int(C.t_bench(C.int(what), C.int(t), C.int(variant), C.int(reps), (*C.double)(unsafe.Pointer(&out[0])),
		C.int(len(out))))
}

func cMemInfo() (free, total int64, rc int) {
	var f, t C.size_t
	rc = int(C.t_mem_info(&f, &t))
	return int64(f), int64(t), rc
}

// modelDims mirrors qr_model_dims.
type modelDims struct {
	vocab, hidden, inter, nlayers int
	nk, nv, dk, dv, kconv         int
	nh, nkv, hd, rot              int
	theta, eps                    float32
	maxTokens                     int
}

func cModelCreate(h *unsafe.Pointer, d modelDims, kinds []int32) int {
	cd := C.qr_model_dims{vocab: C.int(d.vocab), hidden: C.int(d.hidden), inter: C.int(d.inter),
		nlayers: C.int(d.nlayers), nk: C.int(d.nk), nv: C.int(d.nv), dk: C.int(d.dk), dv: C.int(d.dv),
		kconv: C.int(d.kconv), nh: C.int(d.nh), nkv: C.int(d.nkv), hd: C.int(d.hd), rot: C.int(d.rot),
		theta: C.float(d.theta), eps: C.float(d.eps), max_tokens: C.int(d.maxTokens)}
	return int(C.t_model_create(h, &cd, (*C.int32_t)(unsafe.Pointer(&kinds[0]))))
}

func cModelDestroy(h unsafe.Pointer) int { return int(C.t_model_destroy(h)) }
func cModelRandom(h unsafe.Pointer, seed uint64) int {
	return int(C.t_model_random(h, C.uint64_t(seed)))
}
func cModelReset(h unsafe.Pointer) int { return int(C.t_model_reset(h)) }

func cModelSetF32(h unsafe.Pointer, layer, which int, v []float32) int {
	return int(C.t_model_set(h, C.int(layer), C.int(which), unsafe.Pointer(fptr(v)), C.size_t(len(v)), 0))
}

func cModelSetBF16(h unsafe.Pointer, layer, which int, v []uint16) int {
	return int(C.t_model_set(h, C.int(layer), C.int(which), unsafe.Pointer(u16ptr(v)), C.size_t(len(v)), 1))
}

func cModelForward(h unsafe.Pointer, ids []int32, lastOnly bool, logits []float32) int {
	last := C.int(0)
	if lastOnly {
		last = 1
	}
	return int(C.t_model_forward(h, (*C.int32_t)(unsafe.Pointer(&ids[0])), C.int(len(ids)), last, fptr(logits)))
}

func cModelGreedy(h unsafe.Pointer, first int32, out []int32) int {
	var p *C.int32_t
	if len(out) > 0 {
		p = (*C.int32_t)(unsafe.Pointer(&out[0]))
	}
	return int(C.t_model_greedy(h, C.int32_t(first), C.int(len(out)), p))
}

func cModelInfo(h unsafe.Pointer) (pos int, w, s, a int64, rc int) {
	var p C.int
	var cw, cs, ca C.size_t
	rc = int(C.t_model_info(h, &p, &cw, &cs, &ca))
	return int(p), int64(cw), int64(cs), int64(ca), rc
}

func cModelBench(h unsafe.Pointer, what, t, variant, reps int, out []float64) int {
	return int(C.t_model_bench(h, C.int(what), C.int(t), C.int(variant), C.int(reps),
		(*C.double)(unsafe.Pointer(&out[0])), C.int(len(out))))
}

func cModelStageName(i int) string {
	p := C.t_model_stage_name(C.int(i))
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

func cModelGetBF16(h unsafe.Pointer, layer, which int, dst []uint16) int {
	return int(C.t_model_get(h, C.int(layer), C.int(which), unsafe.Pointer(u16ptr(dst)), C.size_t(len(dst))))
}

func cModelGetF32(h unsafe.Pointer, layer, which int, dst []float32) int {
	return int(C.t_model_get(h, C.int(layer), C.int(which), unsafe.Pointer(fptr(dst)), C.size_t(len(dst))))
}
