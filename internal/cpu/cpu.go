// Package cpu chooses the kernel level every fast CPU kernel runs at. The
// level is picked once, at start, from the processor's features; the
// QWENREF_CPU environment variable forces a lower one for tests and
// comparisons:
//
//	amd64: avx512 (AVX-512 F/BW/DQ/VL + FMA; AVX512_BF16 where present), avx2 (AVX2 + FMA), portable
//	arm64: neon, portable
//	other: portable
//
// Kernel packages ask Selected() in their init and register the kernels of
// that level; commands call Check() first so that a bad QWENREF_CPU (or
// QWENREF_BF16, which picks the bf16-compute kernel: see BF16Choice) is an
// error rather than a silent fallback.
package cpu

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	xcpu "golang.org/x/sys/cpu"
)

// Level is a family of kernels; higher levels need more of the CPU.
type Level int

// The kernel levels, lowest first.
const (
	Portable Level = iota // plain Go, any GOARCH
	AVX2                  // amd64 with AVX2 and FMA
	AVX512                // amd64 with AVX-512 F, BW, DQ, VL and FMA
	NEON                  // arm64 Advanced SIMD
)

// EnvVar is the environment variable that forces a level.
const EnvVar = "QWENREF_CPU"

var names = map[Level]string{Portable: "portable", AVX2: "avx2", AVX512: "avx512", NEON: "neon"}

// String is the level's name as QWENREF_CPU spells it.
func (l Level) String() string {
	if n, ok := names[l]; ok {
		return n
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel reads a level name ("avx512", "avx2", "neon", "portable").
func ParseLevel(s string) (Level, bool) {
	for l, n := range names {
		if n == strings.ToLower(strings.TrimSpace(s)) {
			return l, true
		}
	}
	return Portable, false
}

var (
	detected = detect()
	selected Level
	checkErr error
	envBF16  = os.Getenv(BF16EnvVar)
)

func init() { selected, checkErr = choose(os.Getenv(EnvVar), Supported()) }

// choose applies an override (empty: none) to the levels this CPU has,
// best first. An unknown or unsupported override falls back to the best
// level and returns the error Check reports.
func choose(override string, have []Level) (Level, error) {
	if override == "" {
		return have[0], nil
	}
	l, ok := ParseLevel(override)
	if !ok {
		return have[0], fmt.Errorf("%s=%q is not a kernel level; this CPU (%s) has: %s", EnvVar, override, runtime.GOARCH, join(have))
	}
	for _, h := range have {
		if h == l {
			return l, nil
		}
	}
	return have[0], fmt.Errorf("%s=%s: this CPU (%s) lacks it; it has: %s", EnvVar, l, runtime.GOARCH, join(have))
}

func join(ls []Level) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

func detect() Level {
	switch runtime.GOARCH {
	case "amd64":
		x := xcpu.X86
		if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL && x.HasFMA {
			return AVX512
		}
		if x.HasAVX2 && x.HasFMA {
			return AVX2
		}
	case "arm64":
		if xcpu.ARM64.HasASIMD {
			return NEON
		}
	}
	return Portable
}

// Detected is the best level this CPU runs.
func Detected() Level { return detected }

// Supported lists the levels this CPU runs, best first; portable is last.
func Supported() []Level {
	switch detected {
	case AVX512:
		return []Level{AVX512, AVX2, Portable}
	case AVX2:
		return []Level{AVX2, Portable}
	case NEON:
		return []Level{NEON, Portable}
	}
	return []Level{Portable}
}

// Selected is the level the kernels use: the detected one, or the one
// QWENREF_CPU forces.
func Selected() Level { return selected }

// Check reports a QWENREF_CPU that names no level or one this CPU lacks,
// and a QWENREF_BF16 that names no bf16 kernel or one this process cannot
// run (asking the OS for the AMX tile state if it names amx).
func Check() error {
	if checkErr != nil || envBF16 == "" {
		return checkErr
	}
	_, _, err := BF16Choice()
	return err
}

// HasBF16 reports whether the bf16 dot-product instructions
// (AVX512_BF16's VDPBF16PS) may be used: the CPU has them and the
// selected level is avx512.
func HasBF16() bool { return selected == AVX512 && xcpu.X86.HasAVX512BF16 }

// Describe is the one-line summary the commands print, e.g.
// "avx512 (AVX512_BF16; AMX-BF16)" or "avx2 (forced by QWENREF_CPU; detected avx512)".
func Describe() string {
	s := selected.String()
	var extra []string
	if HasBF16() {
		extra = append(extra, "AVX512_BF16")
	}
	if selected == AVX512 && hasAMXCPU() {
		extra = append(extra, "AMX-BF16")
	}
	if selected != detected {
		extra = append(extra, fmt.Sprintf("forced by %s; detected %s", EnvVar, detected))
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, "; ") + ")"
	}
	return s
}
