package conv1d

import "github.com/qwenref/qwenref/internal/cpu"

func init() { kern = kernelsFor(cpu.Selected()) }

// kernelsFor returns the row kernels of a level this build has.
func kernelsFor(l cpu.Level) kernels {
	if l == cpu.NEON {
		return kernels{name: "neon", row4: row4Asm(row4NEON, 4), rows4x4: rows4x4Asm(rows4x4NEON, 4)}
	}
	return portable
}

//go:noescape
func row4NEON(n int, y, r0, r1, r2, r3, w0, w1, w2, w3 *float32)

//go:noescape
func rows4x4NEON(n, c int, y, x, w *float32)
