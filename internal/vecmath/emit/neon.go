package emit

import (
	"bytes"
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/vecmath/expconst"
)

// NEON accumulates one generated arm64 file. Go's arm64 assembler lacks
// most vector floating-point instructions (FADD, FMUL, FDIV, FMAX, FRINTN,
// FCMGT, …), so those are written as WORD encodings with the instruction
// in a comment; loads, stores and integer ops use the native mnemonics.
//
// Kernels that use Exp keep its constants in V18…V31 (LoadConsts) and
// must not use those registers otherwise.
type NEON struct {
	bytes.Buffer
}

// NEON lanes per register (float32).
const NEONLanes = 4

// Constant registers of the NEON exponential.
const (
	nLog2e = 18 + iota
	nLn2Hi
	nLn2Lo
	nCoef // 7 registers
	nOne  = nCoef + len(expconst.Coef)
	nLo   = nOne + 1
	nHi   = nOne + 2
	nInf  = nOne + 3 // V31, the last
)

// I writes one native instruction.
func (a *NEON) I(format string, args ...any) { fmt.Fprintf(a, "\t"+format+"\n", args...) }

// Label writes a label.
func (a *NEON) Label(l string) { fmt.Fprintf(a, "%s:\n", l) }

// Func writes a TEXT header for a NOSPLIT leaf function.
func (a *NEON) Func(name, goSig string, argBytes int) {
	fmt.Fprintf(a, "// func %s%s\nTEXT ·%s(SB), NOSPLIT, $0-%d\n", name, goSig, name, argBytes)
}

// Ret ends a function.
func (a *NEON) Ret() {
	a.I("RET")
	fmt.Fprintln(a)
}

// three-register vector encodings (.4S), d = op(n, m).
const (
	opFADD  = 0x4E20D400
	opFSUB  = 0x4EA0D400
	opFMUL  = 0x6E20DC00
	opFDIV  = 0x6E20FC00
	opFMAX  = 0x4E20F400
	opFMIN  = 0x4EA0F400
	opFMLA  = 0x4E20CC00 // d += n·m
	opFMLS  = 0x4EA0CC00 // d −= n·m
	opFCMGT = 0x6EA0E400 // d = n > m
	opBIT   = 0x6EA01C00 // d = m ? n : d (bitwise)
	opBIC   = 0x4E601C00 // d = n &^ m
	opORR   = 0x4EA01C00 // d = n | m (a move when n = m)
	opEOR   = 0x6E201C00
)

// two-register encodings (.4S), d = op(n).
const (
	opFRINTN = 0x4E218800 // round to nearest, ties to even
	opFCVTZS = 0x4EA1B800
	opFNEG   = 0x6EA0F800
)

var opNames = map[uint32]string{opFADD: "fadd", opFSUB: "fsub", opFMUL: "fmul", opFDIV: "fdiv", opFMAX: "fmax",
	opFMIN: "fmin", opFMLA: "fmla", opFMLS: "fmls", opFCMGT: "fcmgt", opBIT: "bit", opBIC: "bic", opORR: "orr",
	opEOR: "eor", opFRINTN: "frintn", opFCVTZS: "fcvtzs", opFNEG: "fneg"}

// V3 writes a three-register vector instruction: d = op(n, m).
func (a *NEON) V3(op uint32, d, n, m int) {
	fmt.Fprintf(a, "\tWORD $0x%08x // %s v%d.4s, v%d.4s, v%d.4s\n", op|uint32(m)<<16|uint32(n)<<5|uint32(d), opNames[op], d, n, m)
}

// V2 writes a two-register vector instruction: d = op(n).
func (a *NEON) V2(op uint32, d, n int) {
	fmt.Fprintf(a, "\tWORD $0x%08x // %s v%d.4s, v%d.4s\n", op|uint32(n)<<5|uint32(d), opNames[op], d, n)
}

// Mov copies register n to d.
func (a *NEON) Mov(d, n int) { a.V3(opORR, d, n, n) }

// Fadd writes d = n + m.
func (a *NEON) Fadd(d, n, m int) { a.V3(opFADD, d, n, m) }

// Fsub writes d = n − m.
func (a *NEON) Fsub(d, n, m int) { a.V3(opFSUB, d, n, m) }

// Fmul writes d = n·m.
func (a *NEON) Fmul(d, n, m int) { a.V3(opFMUL, d, n, m) }

// Fdiv writes d = n/m.
func (a *NEON) Fdiv(d, n, m int) { a.V3(opFDIV, d, n, m) }

// Fmax writes d = max(n, m) (NaN if either is NaN).
func (a *NEON) Fmax(d, n, m int) { a.V3(opFMAX, d, n, m) }

// Fmla writes d += n·m, fused.
func (a *NEON) Fmla(d, n, m int) { a.V3(opFMLA, d, n, m) }

// Fneg writes d = −n.
func (a *NEON) Fneg(d, n int) { a.V2(opFNEG, d, n) }

// WriteConsts writes the constant table (one 16-byte row per constant
// register, in register order).
func (a *NEON) WriteConsts() {
	vals := []float32{float32(expconst.Log2E), float32(expconst.Ln2Hi), float32(expconst.Ln2Lo)}
	vals = append(vals, expconst.Coef[:]...)
	vals = append(vals, 1, float32(expconst.Underflow), float32(expconst.Overflow), float32(math.Inf(1)))
	off := 0
	for _, v := range vals {
		for range NEONLanes {
			fmt.Fprintf(a, "DATA expNEON<>+%d(SB)/4, $0x%08x\n", off, math.Float32bits(v))
			off += 4
		}
	}
	fmt.Fprintf(a, "GLOBL expNEON<>(SB), RODATA|NOPTR, $%d\n\n", off)
}

// LoadConsts loads V18…V31 from the table, using R27 as the address.
func (a *NEON) LoadConsts() {
	a.I("MOVD $expNEON<>(SB), R27")
	for r := nLog2e; r <= nInf; r += 4 {
		regs := ""
		for i := r; i < min(r+4, nInf+1); i++ {
			if regs != "" {
				regs += ", "
			}
			regs += fmt.Sprintf("V%d.S4", i)
		}
		cnt := min(4, nInf+1-r)
		a.I("VLD1.P %d(R27), [%s]", 16*cnt, regs)
	}
}

// Exp replaces register x with e^x (vecmath.Exp32 lane by lane), using
// temporaries t0…t3. As on AVX2, 2^n is added to the exponent field and the
// two range ends are blended in: +Inf above expconst.Overflow, 0 below
// expconst.Underflow; NaN stays NaN.
func (a *NEON) Exp(x, t0, t1, t2, t3 int) {
	a.Fmul(t0, x, nLog2e)
	a.V2(opFRINTN, t0, t0) // n
	a.Mov(t1, x)
	a.V3(opFMLS, t1, t0, nLn2Hi)
	a.V3(opFMLS, t1, t0, nLn2Lo) // r
	// Horner: p ← c + p·r accumulates into a copy of c, so p moves
	// between t2 and t3 instead of being copied back.
	p, q := t2, t3
	a.Mov(p, nCoef)
	for c := nCoef + 1; c <= nOne; c++ {
		a.Mov(q, c)
		a.Fmla(q, p, t1)
		p, q = q, p
	}
	a.V2(opFCVTZS, t0, t0) // n is integral: exact
	a.I("VSHL $23, V%d.S4, V%d.S4", t0, t0)
	a.I("VADD V%d.S4, V%d.S4, V%d.S4", t0, p, p)
	a.V3(opFCMGT, t0, x, nHi) // x > Overflow: +Inf
	a.V3(opBIT, p, nInf, t0)
	a.V3(opFCMGT, t0, nLo, x) // x < Underflow: 0
	a.V3(opBIC, x, p, t0)
}

// SiLU replaces register u with u/(1+e^−u), using temporaries t0…t4.
func (a *NEON) SiLU(u, t0, t1, t2, t3, t4 int) {
	a.Fneg(t4, u)
	a.Exp(t4, t0, t1, t2, t3)
	a.Fadd(t4, t4, nOne)
	a.Fdiv(u, u, t4)
}

// Sigmoid replaces register x with 1/(1+e^−x), using temporaries t0…t4.
func (a *NEON) Sigmoid(x, t0, t1, t2, t3, t4 int) {
	a.Fneg(t4, x)
	a.Exp(t4, t0, t1, t2, t3)
	a.Fadd(t4, t4, nOne)
	a.Fdiv(x, nOne, t4)
}
