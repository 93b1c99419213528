package cuda

import "github.com/qwenref/qwenref/model"

// The names the package registers in model's backend registry.
const (
	// BackendName is the device-resident model: bf16 weights and GEMMs,
	// fp32 states, accumulation and residual stream.
	BackendName = "cuda"
	// FP32BackendName is the GPU reference: the same device-resident model
	// in fp32 (weights widened there, cuBLAS with TF32 off).
	FP32BackendName = "cuda-fp32"
	// OpsBackendName is the op-by-op bf16 path kept for debugging.
	OpsBackendName = "cuda-ops"
)

func init() {
	model.RegisterBackend(BackendName,
		"NVIDIA GPU, the whole model resident on the device: the checkpoint's weights uploaded once as bf16, "+
			"bf16 tensor-core GEMMs with fp32 accumulation, fp32 residual stream and recurrent states, bf16 KV "+
			"cache; prefill on the device, decode as CUDA-graph replays; dense, MoE (qwen3_5_moe: router, grouped "+
			"expert GEMMs and the shared expert on the device) and Qwen3-Next checkpoints. Needs GDN head dims 128 and attention "+
			"head dim 256 (every released Qwen3.5/3.6 size; other checkpoints run op by op, as cuda-ops); "+
			"takes no part swaps",
		NewBackend)
	model.RegisterBackend(FP32BackendName,
		"NVIDIA GPU reference in fp32: the whole model resident on the device like cuda, but every weight "+
			"(widened from bf16 there), activation, state and cache in fp32, cuBLAS with TF32 off, the per-token "+
			"delta rule, fp32 attention and a router that breaks exact ties as torch does on the CPU; dense, MoE "+
			"and Qwen3-Next checkpoints of any head dims; needs twice cuda's memory; agrees with transformers' "+
			"fp32 at the CPU backends' tolerance",
		NewFP32Backend)
	model.RegisterBackend(OpsBackendName,
		"debugging only: the CUDA kernels op by op with host copies (bf16 matmuls, fp32 conv and attention, "+
			"chunked GDN core), for bisecting the cuda backend against the CPU; slow",
		NewOpsBackend)
}

// H200Ceiling is the device ceiling bench's %ceil column measures the
// cuda backends against: an H200's bf16 GEMM rate through torch (8192³)
// and its device-to-device copy rate, as docs/anchors.md measured them.
var H200Ceiling = model.Ceiling{GFLOPS: 694000, GBPS: 4250, About: "bf16 GEMM; H200, anchors"}

// device describes d as a backend's device part.
func device(d *Device) *model.Device {
	return &model.Device{Name: d.Name(), Ceiling: H200Ceiling}
}

// NewBackend opens the GPU and returns the device-resident "cuda" backend:
// model.NewRunner on it uploads the model and runs it on the device
// (NewRunner below); model.NewRandomRunner on it generates a model's
// weights on the GPU from a seed (what qwenref bench runs without --model).
// Its op kernels are the host-slice ones of cuda-ops, so
// per-op benchmarks and checks still reach the device; its device times
// bench's ops with the library's own benchmarks (DeviceTime). It returns
// an error, never panics, when the driver, cuBLAS or the GPU is missing.
func NewBackend() (*model.Backend, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	dev := device(d)
	dev.NewRunner = func(m *model.Model, rows int) (model.Runner, error) { return newDeviceRunner(d, m, rows, false) }
	dev.NewRandomRunner = func(cfg *model.Config, seed uint64, rows int) (model.Runner, error) {
		return newRandomDeviceRunner(d, cfg, seed, rows, false)
	}
	dev.Time = func(op string, cfg *model.Config, t int) (*model.DeviceTiming, error) {
		return DeviceTime(d, op, cfg, t)
	}
	dev.Supports = SupportsResident
	return &model.Backend{Name: BackendName, MatMul: MatMul{d}, Conv: Conv{d}, Delta: GatedDelta{d, Auto},
		Attn: Attention{d}, Precision: model.PrecisionBF16, Device: dev, Release: d.Close}, nil
}

// NewFP32Backend opens the GPU and returns "cuda-fp32": model.NewRunner on
// it uploads the model as the fp32 resident model, which runs the same
// block plan as "cuda" with fp32 forms of its ops (csrc/plan_f32.cu): fp32
// GEMMs with TF32 off, the fp32 conv, the per-token delta rule, fp32
// attention, and the router in the CPU's tie order. The delta rule is the
// recurrence, not the chunked kernel: the chunked kernel keeps the
// cumulative log-decay γ in fp32, which at |γ| ≈ 100 moves e^γ by about
// 1e-5 (seen as 1.8e-5 on the final state of the hub-bf16-sharded golden),
// while the recurrence applies e^{g_t} one token at a time and meets the
// 1e-5 bar. Its op kernels (MatMulF32 and the others) serve bench's per-op
// rows and any caller that hands the CPU's block these ops.
func NewFP32Backend() (*model.Backend, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	dev := device(d)
	dev.NewRunner = func(m *model.Model, rows int) (model.Runner, error) { return newDeviceRunner(d, m, rows, true) }
	dev.NewRandomRunner = func(cfg *model.Config, seed uint64, rows int) (model.Runner, error) {
		return newRandomDeviceRunner(d, cfg, seed, rows, true)
	}
	dev.Supports = SupportsResidentFP32
	return &model.Backend{Name: FP32BackendName, MatMul: MatMulF32{d}, Conv: Conv{d}, Delta: GatedDelta{d, Recurrent},
		Attn: Attention{d}, Precision: model.PrecisionF32, Device: dev, Release: d.Close}, nil
}

// NewOpsBackend opens the GPU and returns "cuda-ops": every model op on the
// device through the host-slice kernels (MatMul, Conv, GatedDelta with
// Auto, Attention), copying activations in and out each op.
func NewOpsBackend() (*model.Backend, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	return &model.Backend{Name: OpsBackendName, MatMul: MatMul{d}, Conv: Conv{d}, Delta: GatedDelta{d, Auto},
		Attn: Attention{d}, Precision: model.PrecisionBF16, Device: device(d), Release: d.Close}, nil
}
