//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
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

// Device is an open CUDA backend on GPU 0: the loaded library plus the
// weights uploaded so far. All methods are safe for concurrent use; calls
// are serialised, since they share one stream.
type Device struct {
	mu      sync.Mutex
	closed  bool
	name    string
	sms     int
	cc      [2]int
	mem     int64
	weights map[*tensor.Matrix]unsafe.Pointer // bf16 copies, keyed by the host matrix
	models  map[*Model]struct{}               // device-resident models not yet closed
}

// Open loads the library (see LibraryPath) and initialises GPU 0.
func Open() (*Device, error) {
	if err := load(); err != nil {
		return nil, err
	}
	libMu.Lock()
	defer libMu.Unlock()
	d := &Device{weights: map[*tensor.Matrix]unsafe.Pointer{}, models: map[*Model]struct{}{}}
	runtime.LockOSThread() // the library's last error is per OS thread
	defer runtime.UnlockOSThread()
	if rc := cInit(0); rc != 0 {
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

// Name describes the GPU, e.g. "NVIDIA H200 (sm_90, 132 SMs, 140 GiB)".
func (d *Device) Name() string {
	return fmt.Sprintf("%s (sm_%d%d, %d SMs, %d GiB)", d.name, d.cc[0], d.cc[1], d.sms, d.mem>>30)
}

// Close frees every cached weight and every Model not yet closed and, for
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
	for m, p := range d.weights {
		if rc := cFree(p); rc != 0 && first == nil {
			first = &Error{Code: rc, Op: "free", Msg: cLastError()}
		}
		delete(d.weights, m)
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
		return cUploadF32(&p, w.F32)
	})
	if err != nil {
		return nil, err
	}
	d.weights[w] = p
	return p, nil
}

// CachedWeights is the number of weight matrices resident on the device.
func (d *Device) CachedWeights() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.weights)
}
