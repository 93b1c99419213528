package attention

import "github.com/qwenref/qwenref/internal/cpu"

func init() { kern = kernelsFor(cpu.Selected()) }

// kernelsFor returns the kernels of a level this build has.
func kernelsFor(l cpu.Level) kernels {
	if l == cpu.NEON {
		return kernels{name: "neon", lanes: 4, gemm: gemmAsm(tilesNEON, 4), softmax: softmaxAsm(softmaxNEON, 4)}
	}
	return portable
}
