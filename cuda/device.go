package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"unsafe"

	"github.com/qwenref/qwenref/tensor"
)

// Error is a failure reported by the CUDA library: its status code, the
// operation that failed, and the library's message (which names the CUDA or
// cuBLAS call, its error and the source line).
type Error struct {
	Code int
	Op   string
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (code %d)", e.Op, e.Msg, e.Code) }

// ErrClosed is returned by every call on a closed Device.
var ErrClosed = errors.New("cuda: device is closed")

// The library state is process-wide (one CUDA context, one cuBLAS handle), so
// Devices share it: the first Open initialises it, the last Close shuts it down.
var (
	libMu   sync.Mutex
	openCnt int
)

// Device is an open CUDA backend on one GPU: the loaded library plus the
// weights uploaded so far. All methods are safe for concurrent use; calls
// are serialised, since they share one stream.
type Device struct {
	mu      sync.Mutex
	closed  bool
	gpu     int
	name    string
	sms     int
	cc      [2]int
	mem     int64
	weights map[*tensor.Matrix]unsafe.Pointer // bf16 copies, keyed by the host matrix
	wide    map[*tensor.Matrix]unsafe.Pointer // fp32 copies (MatMulF32), likewise
	models  map[*residentModel]struct{}       // device-resident models not yet closed
}

// gpu is the device Open selects: SetGPU (--gpu N in the commands), else
// $QWENREF_GPU, else 0. gpuErr holds a bad $QWENREF_GPU for Open to report.
var gpu, gpuErr = gpuFromEnv()

// GPUEnv names the variable that picks the GPU when SetGPU was not called.
const GPUEnv = "QWENREF_GPU"

func gpuFromEnv() (int, error) {
	s := os.Getenv(GPUEnv)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cuda: %s=%q: want a GPU number, 0 or more", GPUEnv, s)
	}
	return n, nil
}

// SetGPU selects the GPU (0-based, as nvidia-smi numbers them) that later
// Opens use. The library keeps one CUDA context per process, so every open
// Device of a process is on the same GPU.
func SetGPU(n int) error {
	if n < 0 {
		return fmt.Errorf("cuda: GPU %d: must be 0 or more", n)
	}
	libMu.Lock()
	defer libMu.Unlock()
	if openCnt > 0 && n != gpu {
		return fmt.Errorf("cuda: GPU %d asked for while GPU %d is open", n, gpu)
	}
	gpu, gpuErr = n, nil
	return nil
}

// Open loads the library (see prepareLibrary in find.go) and initialises
// the GPU SetGPU chose (0 by default).
func Open() (*Device, error) {
	if gpuErr != nil {
		return nil, gpuErr
	}
	if err := load(); err != nil {
		return nil, err
	}
	libMu.Lock()
	defer libMu.Unlock()
	d := &Device{gpu: gpu, weights: map[*tensor.Matrix]unsafe.Pointer{}, wide: map[*tensor.Matrix]unsafe.Pointer{},
		models: map[*residentModel]struct{}{}}
	runtime.LockOSThread() // the library's last error is per OS thread
	defer runtime.UnlockOSThread()
	if n, rc := cDeviceCount(); rc != 0 {
		return nil, &Error{Code: rc, Op: "device_count", Msg: cLastError()}
	} else if gpu >= n {
		return nil, fmt.Errorf("cuda: GPU %d asked for, but this machine has %d (numbered from 0)", gpu, n)
	}
	if rc := cInit(gpu); rc != 0 {
		return nil, &Error{Code: rc, Op: "init", Msg: cLastError()}
	}
	openCnt++
	name, sms, ma, mi, mem, rc := cDeviceInfo()
	if rc != 0 {
		err := &Error{Code: rc, Op: "device_info", Msg: cLastError()}
		d.closed = true
		_ = d.release()
		return nil, err
	}
	d.name, d.sms, d.cc, d.mem = name, sms, [2]int{ma, mi}, mem
	return d, nil
}

// Name describes the GPU, e.g. "GPU 0: NVIDIA H200 (sm_90, 132 SMs, 140 GiB)".
func (d *Device) Name() string {
	return fmt.Sprintf("GPU %d: %s (sm_%d%d, %d SMs, %d GiB)", d.gpu, d.name, d.cc[0], d.cc[1], d.sms, d.mem>>30)
}

// Close frees every cached weight and every resident model not yet closed and, for
// the last open Device, shuts the library down. Calling it twice is harmless.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var first error
	for m := range d.models {
		if rc := cModelDestroy(m.h); rc != 0 && first == nil {
			first = &Error{Code: rc, Op: "model_destroy", Msg: cLastError()}
		}
		delete(d.models, m)
	}
	for _, cache := range []map[*tensor.Matrix]unsafe.Pointer{d.weights, d.wide} {
		for m, p := range cache {
			if rc := cFree(p); rc != 0 && first == nil {
				first = &Error{Code: rc, Op: "free", Msg: cLastError()}
			}
			delete(cache, m)
		}
	}
	libMu.Lock()
	defer libMu.Unlock()
	if err := d.release(); first == nil {
		first = err
	}
	return first
}

// release drops this Device's share of the library; libMu must be held.
func (d *Device) release() error {
	openCnt--
	if openCnt > 0 {
		return nil
	}
	if rc := cShutdown(); rc != 0 {
		return &Error{Code: rc, Op: "shutdown", Msg: cLastError()}
	}
	return nil
}

// call runs f with the device locked and on one OS thread (the library's
// error message is thread-local), turning a nonzero status into an *Error.
func (d *Device) call(op string, f func() int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.callLocked(op, f)
}

func (d *Device) callLocked(op string, f func() int) error {
	if d.closed {
		return ErrClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if rc := f(); rc != 0 {
		return &Error{Code: rc, Op: op, Msg: cLastError()}
	}
	return nil
}

// weight returns the device bf16 copy of w, uploading it on first use. The
// cache is keyed by the Matrix pointer: weights are immutable once loaded,
// so a matrix changed after its first use must be a new *Matrix.
// d.mu must be held.
func (d *Device) weight(w *tensor.Matrix) (unsafe.Pointer, error) {
	if p, ok := d.weights[w]; ok {
		return p, nil
	}
	var p unsafe.Pointer
	err := d.callLocked("upload", func() int {
		if w.IsBF16() {
			return cUploadBF16(&p, w.BF16)
		}
		return cUploadF32AsBF16(&p, w.F32)
	})
	if err != nil {
		return nil, err
	}
	d.weights[w] = p
	return p, nil
}

// wideWeight returns the device fp32 copy of w (bf16 storage widened
// exactly), uploading it on first use; d.mu must be held.
func (d *Device) wideWeight(w *tensor.Matrix) (unsafe.Pointer, error) {
	if p, ok := d.wide[w]; ok {
		return p, nil
	}
	var p unsafe.Pointer
	err := d.callLocked("upload_f32", func() int {
		if w.IsBF16() {
			return cUploadBF16AsF32(&p, w.BF16)
		}
		return cUploadF32(&p, w.F32)
	})
	if err != nil {
		return nil, err
	}
	d.wide[w] = p
	return p, nil
}

// CachedWeights is the number of weight matrices resident on the device.
func (d *Device) CachedWeights() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.weights) + len(d.wide)
}
