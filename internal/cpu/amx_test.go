package cpu

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestChooseBF16 runs the bf16 kernel choice against a fake AMX check for
// each way the tile state can be refused (ENOSPC: a signal stack too small;
// EINVAL: a kernel without the permission call) and each override.
func TestChooseBF16(t *testing.T) {
	enospc := errors.New("the kernel refused the AMX tile state (ENOSPC: a thread's signal stack is too small for it)")
	einval := errors.New("the kernel refused the AMX tile state (EINVAL: no AMX permission control; Linux 5.16 or later needed)")
	for _, c := range []struct {
		override   string
		avx512bf16 bool
		amx        error
		want       BF16Kernel
		wantNote   string // in the note ("" when none is expected)
		wantErr    string // in the error
		amxAsked   bool
	}{
		{"", true, nil, BF16AMX, "", "", true},
		{"", true, enospc, BF16AVX512, "amx: the kernel refused the AMX tile state (ENOSPC", "", true},
		{"", true, einval, BF16AVX512, "EINVAL", "", true},
		{"", false, einval, BF16Widen, "avx512bf16: needs AVX512_BF16", "", true},
		{"widen", true, nil, BF16Widen, "", "", false},
		{"AVX512BF16", true, nil, BF16AVX512, "", "", false},
		{"avx512bf16", false, nil, BF16AMX, "", "QWENREF_BF16=avx512bf16: VDPBF16PS needs AVX512_BF16", true},
		{"amx", true, nil, BF16AMX, "", "", true},
		{"amx", true, enospc, BF16AVX512, "ENOSPC", "QWENREF_BF16=amx: the kernel refused the AMX tile state (ENOSPC", true},
		{"amx", false, einval, BF16Widen, "EINVAL", "EINVAL", true},
		{"tiles", true, nil, BF16AMX, "", `QWENREF_BF16="tiles" is not a bf16 kernel`, true},
	} {
		asked := false
		amx := func() error { asked = true; return c.amx }
		got, note, err := chooseBF16(c.override, c.avx512bf16, amx)
		name := c.override + "/" + map[bool]string{true: "vdpbf16ps", false: "no-vdpbf16ps"}[c.avx512bf16]
		if got != c.want {
			t.Errorf("%s, amx %v: kernel %v, want %v", name, c.amx, got, c.want)
		}
		if (c.wantNote == "") != (note == "") || !strings.Contains(note, c.wantNote) {
			t.Errorf("%s, amx %v: note %q, want one containing %q", name, c.amx, note, c.wantNote)
		}
		if (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s, amx %v: error %v, want %q", name, c.amx, err, c.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "using") {
			t.Errorf("%s: error %v names a kernel used instead, but the commands stop on it (Check)", name, err)
		}
		if asked != c.amxAsked {
			t.Errorf("%s: AMX asked %v, want %v (only a choice that could be AMX may ask the OS)", name, asked, c.amxAsked)
		}
	}
}

func TestParseBF16Kernel(t *testing.T) {
	for k, n := range bf16Names {
		if got, ok := ParseBF16Kernel(" " + strings.ToUpper(n) + " "); !ok || got != k {
			t.Errorf("ParseBF16Kernel(%q) = %v, %v", n, got, ok)
		}
	}
	if _, ok := ParseBF16Kernel("avx2"); ok {
		t.Error("avx2 parsed as a bf16 kernel")
	}
}

// TestBF16ChoiceMatchesEnv: the kernel QWENREF_BF16 forces is the one in
// use, and AMX is used only at the avx512 level (scripts/test runs the
// suites under each QWENREF_CPU level).
func TestBF16ChoiceMatchesEnv(t *testing.T) {
	k, note, err := BF16Choice()
	t.Logf("bf16 kernel %s (%s), error %v", k, note, err)
	if env := os.Getenv(BF16EnvVar); env != "" {
		if err != nil {
			t.Skipf("%s=%s cannot run here: %v", BF16EnvVar, env, err)
		}
		if want, _ := ParseBF16Kernel(env); k != want {
			t.Fatalf("%s=%s but the choice is %v", BF16EnvVar, env, k)
		}
	} else if err != nil {
		t.Fatalf("no override but an error: %v", err)
	}
	if Selected() != AVX512 && k != BF16Widen {
		t.Fatalf("level %s chose %v: only widen runs below avx512", Selected(), k)
	}
	if k == BF16AMX && AMX() != nil {
		t.Fatalf("AMX chosen but AMX() = %v", AMX())
	}
	if checkErr == nil && (Check() == nil) != (err == nil) {
		t.Fatalf("Check() = %v disagrees with the choice's error %v", Check(), err)
	}
}
