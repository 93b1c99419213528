//go:build cuda

package cuda

import "github.com/qwenref/qwenref/model"

// BackendName is the name the package registers in model's backend registry.
const BackendName = "cuda"

func init() {
	model.RegisterBackend(BackendName,
		"NVIDIA GPU (libqwenref_cuda.so), op by op with host copies: cuBLAS bf16 matmuls (activations rounded "+
			"to bf16), fp32 conv and attention, chunked GDN core (bf16 tensor cores at head dim 128, else fp32); "+
			"bf16-level agreement, not fp32. The device-resident whole model is cuda.Model",
		NewBackend)
}

// NewBackend opens the GPU and returns the op-level "cuda" backend: every
// model op runs on the device through the host-slice kernels (MatMul, Conv,
// GatedDelta with Auto, Attention). It returns an error, never panics, when
// the library or the GPU is missing. Backend.Close closes the Device.
func NewBackend() (*model.Backend, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	return &model.Backend{Name: BackendName, MatMul: MatMul{d}, Conv: Conv{d}, Delta: GatedDelta{d, Auto},
		Attn: Attention{d}, Release: d.Close}, nil
}
