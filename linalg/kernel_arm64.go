package linalg

import (
	"unsafe"

	"github.com/qwenref/qwenref/internal/cpu"
)

// init registers the NEON kernels unless QWENREF_CPU=portable.
func init() {
	if cpu.Selected() == cpu.NEON {
		registerGemm(neonGemm)
		registerGemv(neonGemv)
		tpose4F32, tpose4BF16, packName = transpose4F32, transpose4BF16, "neon"
	}
}

// neonGemm is the 8×12 assembly kernel (kernel_arm64.s): 24 accumulators
// of the 32 vector registers, B in three and A in two, FMLA by element.
var neonGemm = &gemmKernel{name: "neonasm8x12", level: cpu.NEON, mr: 8, nr: 12, prio: 10, tile: neonTile}

func neonTile(kc int, a, b, c []float32, ldc, rows, cols int, acc bool) {
	_ = a[kc*rows-1]
	_ = b[kc*12-1]
	if cols == 12 {
		_ = c[(rows-1)*ldc+11]
		accFlag := 0
		if acc {
			accFlag = 1
		}
		sgemmNEON[rows](kc, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, accFlag)
		return
	}
	// Ragged right edge: compute the full tile into scratch, copy cols.
	var t [8 * 12]float32
	sgemmNEON[rows](kc, unsafe.SliceData(a), unsafe.SliceData(b), &t[0], 12, 0)
	for i := 0; i < rows; i++ {
		ci, ti := c[i*ldc:i*ldc+cols], t[i*12:i*12+cols]
		if acc {
			for j, v := range ti {
				ci[j] += v
			}
		} else {
			copy(ci, ti)
		}
	}
}

// neonGemv is the 8-row streaming kernel, two 4-lane accumulators per row.
// Its maxM is a guess (no arm64 machine measured it): the AVX2 kernel's,
// the blocking's cap.
var neonGemv = &gemvKernel{name: "neonasm8", level: cpu.NEON, prio: 10, maxM: 8, f32: neonGemvF32, bf16: neonGemvBF16}

func neonGemvF32(y []float32, ldy int, x []float32, m, k int, w []float32) {
	streamRows8F32(&sgemvF32NEON, y, ldy, x, m, k, w)
}

func neonGemvBF16(y []float32, ldy int, x []float32, m, k int, w []uint16) {
	streamRows8BF16(&sgemvBF16NEON, y, ldy, x, m, k, w)
}
