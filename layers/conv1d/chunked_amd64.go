package conv1d

import "github.com/qwenref/qwenref/internal/cpu"

func init() { kern = kernelsFor(cpu.Selected()) }

// kernelsFor returns the row kernels of a level this build has.
func kernelsFor(l cpu.Level) kernels {
	switch l {
	case cpu.AVX512:
		return kernels{name: "avx512", row4: row4Asm(row4AVX512, 16), rows4x4: rows4x4Asm(rows4x4AVX512, 16)}
	case cpu.AVX2:
		return kernels{name: "avx2", row4: row4Asm(row4AVX2, 8), rows4x4: rows4x4Asm(rows4x4AVX2, 8)}
	}
	return portable
}

//go:noescape
func row4AVX512(n int, y, r0, r1, r2, r3, w0, w1, w2, w3 *float32)

//go:noescape
func rows4x4AVX512(n, c int, y, x, w *float32)

//go:noescape
func row4AVX2(n int, y, r0, r1, r2, r3, w0, w1, w2, w3 *float32)

//go:noescape
func rows4x4AVX2(n, c int, y, x, w *float32)
