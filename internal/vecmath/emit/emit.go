// Package emit writes amd64 assembly for the generators (internal/kernelgen) of
// the packages whose kernels evaluate the exponential inside their loops:
// vecmath itself, conv1d and attention. It holds the one vector form of
// vecmath.Exp32, so every generated kernel runs the same reduction, the
// same polynomial and the same range handling; only the generated .s files
// repeat it.
//
// Two instruction sets: AVX-512 (16 lanes in Z registers; VSCALEFPS applies
// 2^n and underflows gracefully) and AVX2 + FMA (8 lanes in Y registers;
// 2^n is added to the exponent bits and the range ends are blended in).
package emit

import (
	"bytes"
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/vecmath/expconst"
)

// ISA is one amd64 vector instruction set.
type ISA struct {
	Name  string // "AVX512" or "AVX2", the suffix of generated function names
	Reg   string // register prefix: "Z" or "Y"
	Lanes int    // float32 lanes per register
}

// The instruction sets the generators target.
var (
	AVX512 = ISA{Name: "AVX512", Reg: "Z", Lanes: 16}
	AVX2   = ISA{Name: "AVX2", Reg: "Y", Lanes: 8}
)

// Width is the width of one register in bytes.
func (s ISA) Width() int { return 4 * s.Lanes }

// R names register i, e.g. Z3 or Y3.
func (s ISA) R(i int) string { return fmt.Sprintf("%s%d", s.Reg, i) }

// Clamp registers: AVX-512 kernels keep the exp argument bounds in Z30 and
// Z31 (loaded by LoadClamp), so that VMAXPS/VMINPS can take the argument as
// the operand they return on NaN. Kernels must not use them otherwise.
const clampLo, clampHi = "Z30", "Z31"

// Slots of the constant table, one register width each.
const (
	slotSign = iota
	slotLo
	slotHi
	slotLog2e
	slotLn2Hi
	slotLn2Lo
	slotCoef // 7 slots: expconst.Coef
	slotOne  = slotCoef + len(expconst.Coef)
	slotInf  = slotOne + 1
	nSlots   = slotInf + 1
)

// Asm accumulates one generated file.
type Asm struct {
	bytes.Buffer
	ISA
	sym string // the constant table's symbol, e.g. expAVX512<>
}

// New starts a file for one instruction set; Header and Consts are written
// by the caller (once per file; see WriteConsts).
func New(isa ISA) *Asm { return &Asm{ISA: isa, sym: "exp" + isa.Name + "<>"} }

// I writes one instruction.
func (a *Asm) I(format string, args ...any) { fmt.Fprintf(a, "\t"+format+"\n", args...) }

// Label writes a label.
func (a *Asm) Label(l string) { fmt.Fprintf(a, "%s:\n", l) }

// C is the memory operand of constant slot s.
func (a *Asm) c(s int) string { return fmt.Sprintf("%s+%d(SB)", a.sym, s*a.Width()) }

// One is the memory operand holding 1.0 in every lane.
func (a *Asm) One() string { return a.c(slotOne) }

// Sign is the memory operand holding the sign bit in every lane.
func (a *Asm) Sign() string { return a.c(slotSign) }

// WriteConsts writes the constant table of this file's instruction set.
func (a *Asm) WriteConsts() {
	vals := make([]uint32, nSlots)
	lo, hi := float32(expconst.Underflow), float32(expconst.Overflow)
	if a.ISA == AVX512 {
		// VSCALEFPS handles both ends itself: clamping to [−104, 89]
		// keeps n finite, e^−104 scales to 0 through the subnormals, and
		// e^89 overflows to +Inf, as the true value does.
		lo, hi = -104, 89
	}
	vals[slotSign] = 0x80000000
	vals[slotLo] = math.Float32bits(lo)
	vals[slotHi] = math.Float32bits(hi)
	vals[slotLog2e] = math.Float32bits(float32(expconst.Log2E))
	vals[slotLn2Hi] = math.Float32bits(float32(expconst.Ln2Hi))
	vals[slotLn2Lo] = math.Float32bits(float32(expconst.Ln2Lo))
	for i, c := range expconst.Coef {
		vals[slotCoef+i] = math.Float32bits(c)
	}
	vals[slotOne] = math.Float32bits(1)
	vals[slotInf] = math.Float32bits(float32(math.Inf(1)))
	off := 0
	for _, v := range vals {
		for range a.Lanes {
			fmt.Fprintf(a, "DATA %s+%d(SB)/4, $0x%08x\n", a.sym, off, v)
			off += 4
		}
	}
	fmt.Fprintf(a, "GLOBL %s(SB), RODATA|NOPTR, $%d\n\n", a.sym, off)
}

// LoadClamp loads the AVX-512 clamp registers; call it in the prologue of
// every AVX-512 function that uses Exp. On AVX2 it does nothing.
func (a *Asm) LoadClamp() {
	if a.ISA == AVX512 {
		a.I("VMOVUPS %s, %s", a.c(slotLo), clampLo)
		a.I("VMOVUPS %s, %s", a.c(slotHi), clampHi)
	}
}

// Exp replaces register x with e^x, using temporaries t0, t1 and (AVX2
// only) t2. It is vecmath.Exp32 lane by lane: n = round(x·log2 e),
// r = x − n·ln2 in two parts, e^r from the degree-7 Taylor polynomial, then
// 2^n applied. NaN stays NaN, −Inf gives 0 and +Inf gives +Inf.
func (a *Asm) Exp(x, t0, t1, t2 string) {
	if a.ISA == AVX512 {
		// x as the last-listed source is the one returned on NaN.
		a.I("VMAXPS %s, %s, %s", x, clampLo, x)
		a.I("VMINPS %s, %s, %s", x, clampHi, x)
		a.I("VMULPS %s, %s, %s", a.c(slotLog2e), x, t0)
		a.I("VRNDSCALEPS $0, %s, %s", t0, t0) // n, to nearest even
		a.I("VFNMADD231PS %s, %s, %s", a.c(slotLn2Hi), t0, x)
		a.I("VFNMADD231PS %s, %s, %s", a.c(slotLn2Lo), t0, x) // r
		a.poly(x, t1)
		a.I("VSCALEFPS %s, %s, %s", t0, t1, x) // p·2^n
		return
	}
	a.I("VMULPS %s, %s, %s", a.c(slotLog2e), x, t0)
	a.I("VROUNDPS $8, %s, %s", t0, t0) // n, to nearest even, no exceptions
	a.I("VMOVAPS %s, %s", x, t1)
	a.I("VFNMADD231PS %s, %s, %s", a.c(slotLn2Hi), t0, t1)
	a.I("VFNMADD231PS %s, %s, %s", a.c(slotLn2Lo), t0, t1) // r
	a.poly(t1, t2)
	// 2^n: add n to the exponent field of p ∈ [0.7, 1.5]. Exact while the
	// result is a normal number, which the two blends below guarantee.
	a.I("VCVTPS2DQ %s, %s", t0, t0)
	a.I("VPSLLD $23, %s, %s", t0, t0)
	a.I("VPADDD %s, %s, %s", t0, t2, t2)
	a.I("VCMPPS $0x1e, %s, %s, %s", a.c(slotHi), x, t0) // x > ln(max float32): +Inf
	a.I("VBLENDVPS %s, %s, %s, %s", t0, a.c(slotInf), t2, t2)
	a.I("VCMPPS $0x11, %s, %s, %s", a.c(slotLo), x, t0) // x < ExpUnderflow: 0
	a.I("VANDNPS %s, %s, %s", t2, t0, x)
}

// poly sets p = Σ ExpCoef·r^k + 1 by Horner's rule (r is not changed).
func (a *Asm) poly(r, p string) {
	a.I("VMOVUPS %s, %s", a.c(slotCoef), p)
	for i := 1; i < len(expconst.Coef); i++ {
		a.I("VFMADD213PS %s, %s, %s", a.c(slotCoef+i), r, p)
	}
	a.I("VFMADD213PS %s, %s, %s", a.c(slotOne), r, p)
}

// SiLU replaces register u with u/(1+e^−u), using temporaries t0…t3 (t3
// is used on AVX2 only). u = −Inf gives NaN, as PyTorch's u·σ(u) does.
func (a *Asm) SiLU(u, t0, t1, t2, t3 string) {
	a.I("VXORPS %s, %s, %s", a.Sign(), u, t2)
	a.Exp(t2, t0, t1, t3)
	a.I("VADDPS %s, %s, %s", a.One(), t2, t2)
	a.I("VDIVPS %s, %s, %s", t2, u, u)
}

// Sigmoid replaces register x with 1/(1+e^−x), using temporaries t0…t3
// (t3 on AVX2 only).
func (a *Asm) Sigmoid(x, t0, t1, t2, t3 string) {
	a.I("VXORPS %s, %s, %s", a.Sign(), x, t2)
	a.Exp(t2, t0, t1, t3)
	a.I("VADDPS %s, %s, %s", a.One(), t2, t2)
	a.I("VMOVUPS %s, %s", a.One(), x)
	a.I("VDIVPS %s, %s, %s", t2, x, x)
}

// Func writes a TEXT header for a NOSPLIT function with no locals and
// argBytes of arguments, after a comment with its Go signature.
func (a *Asm) Func(name, goSig string, argBytes int) {
	fmt.Fprintf(a, "// func %s%s\nTEXT ·%s(SB), NOSPLIT, $0-%d\n", name, goSig, name, argBytes)
}

// Ret ends a function.
func (a *Asm) Ret() {
	a.I("VZEROUPPER")
	a.I("RET")
	fmt.Fprintln(a)
}
