package attention

import "github.com/qwenref/qwenref/internal/cpu"

func init() { kern = kernelsFor(cpu.Selected()) }

// kernelsFor returns the kernels of a level this build has.
func kernelsFor(l cpu.Level) kernels {
	switch l {
	case cpu.AVX512:
		return kernels{name: "avx512", lanes: 16, gemm: gemmAsm(tilesAVX512, 16), softmax: softmaxAsm(softmaxAVX512, 16)}
	case cpu.AVX2:
		return kernels{name: "avx2", lanes: 8, gemm: gemmAsm(tilesAVX2, 8), softmax: softmaxAsm(softmaxAVX2, 8)}
	}
	return portable
}
