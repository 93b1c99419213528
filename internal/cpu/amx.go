package cpu

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	xcpu "golang.org/x/sys/cpu"
)

// BF16EnvVar is the environment variable that forces the bf16-compute
// kernel: amx, avx512bf16 or widen.
const BF16EnvVar = "QWENREF_BF16"

// BF16Kernel is a way to compute a product with bf16 operands, the kernel
// behind the bf16-compute product (`matmul=bf16`).
type BF16Kernel int

// The bf16 kernels, worst first.
const (
	// BF16Widen widens bf16 to float32 and multiplies in float32 (every CPU
	// and level): the exact product of the bf16 weights, x not rounded.
	BF16Widen BF16Kernel = iota
	// BF16AVX512 is AVX512_BF16's VDPBF16PS (kernel level avx512).
	BF16AVX512
	// BF16AMX is AMX-BF16's TDPBF16PS on the tile registers (kernel level
	// avx512, Linux, with the kernel's tile-data permission).
	BF16AMX
)

var bf16Names = map[BF16Kernel]string{BF16Widen: "widen", BF16AVX512: "avx512bf16", BF16AMX: "amx"}

// String is the kernel's name as QWENREF_BF16 spells it.
func (k BF16Kernel) String() string {
	if n, ok := bf16Names[k]; ok {
		return n
	}
	return fmt.Sprintf("BF16Kernel(%d)", int(k))
}

// ParseBF16Kernel reads a bf16 kernel name ("amx", "avx512bf16", "widen").
func ParseBF16Kernel(s string) (BF16Kernel, bool) {
	for k, n := range bf16Names {
		if n == strings.ToLower(strings.TrimSpace(s)) {
			return k, true
		}
	}
	return BF16Widen, false
}

// hasAMXCPU: the processor has the AMX tiles and their bf16 product.
func hasAMXCPU() bool { return xcpu.X86.HasAMXTile && xcpu.X86.HasAMXBF16 }

var (
	amxOnce sync.Once
	amxErr  error
	// tilePermission asks the OS for the tile-data state (amx_linux_amd64.go).
	tilePermission = requestTilePermission
)

// AMX reports whether the AMX-BF16 tile kernels may run in this process:
// nil when the CPU has AMX-TILE and AMX-BF16, the selected level is avx512,
// and the OS grants the tile-data permission, which the first call asks
// for (once per process; Linux refuses it, for one, when a thread's signal
// stack is too small for the 8 KiB of tile state). Otherwise the error
// says why not; a tile instruction must not run then.
func AMX() error {
	if selected != AVX512 {
		return fmt.Errorf("AMX needs kernel level avx512; this process runs %s", selected)
	}
	if !hasAMXCPU() {
		return errors.New("this CPU has no AMX-BF16")
	}
	amxOnce.Do(func() { amxErr = tilePermission() })
	return amxErr
}

// BF16Choice is the bf16 kernel in use: the one QWENREF_BF16 names, or the
// best this process can run (amx, then avx512bf16, then widen). note says
// why a better kernel is not used (empty when none is better or the choice
// was forced); err reports a QWENREF_BF16 that names no kernel or one this
// process cannot run, and then the best kernel is returned for
// descriptions (the commands refuse to run, through Check).
func BF16Choice() (k BF16Kernel, note string, err error) {
	return chooseBF16(envBF16, HasBF16(), AMX)
}

// chooseBF16 is BF16Choice for an override (empty: none), whether
// VDPBF16PS may run and the AMX check, which is called only when AMX is
// wanted: it may ask the OS for the tile state.
func chooseBF16(override string, avx512bf16 bool, amx func() error) (BF16Kernel, string, error) {
	var forceErr error
	if override != "" {
		k, ok := ParseBF16Kernel(override)
		switch {
		case !ok:
			forceErr = fmt.Errorf("%s=%q is not a bf16 kernel (amx, avx512bf16, widen)", BF16EnvVar, override)
		case k == BF16Widen:
			return k, "", nil
		case k == BF16AVX512 && avx512bf16:
			return k, "", nil
		case k == BF16AVX512:
			forceErr = fmt.Errorf("%s=%s: VDPBF16PS needs AVX512_BF16 at kernel level avx512", BF16EnvVar, k)
		default:
			err := amx()
			if err == nil {
				return k, "", nil
			}
			forceErr = fmt.Errorf("%s=%s: %w", BF16EnvVar, k, err)
		}
	}
	var notes []string
	best := BF16Widen
	if err := amx(); err == nil {
		best = BF16AMX
	} else {
		notes = append(notes, "amx: "+err.Error())
		if avx512bf16 {
			best = BF16AVX512
		} else {
			notes = append(notes, "avx512bf16: needs AVX512_BF16 at kernel level avx512")
		}
	}
	// A forced kernel that cannot run is an error the commands stop on
	// (Check), so it names no fallback: nothing runs "instead".
	return best, strings.Join(notes, "; "), forceErr
}
