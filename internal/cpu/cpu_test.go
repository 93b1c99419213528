package cpu

import (
	"os"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	have := []Level{AVX512, AVX2, Portable}
	for _, c := range []struct {
		in      string
		want    Level
		wantErr string
	}{
		{"", AVX512, ""},
		{"avx2", AVX2, ""},
		{"PORTABLE", Portable, ""},
		{"neon", AVX512, "lacks it; it has: avx512, avx2, portable"},
		{"sse9", AVX512, "is not a kernel level"},
	} {
		got, err := choose(c.in, have)
		if got != c.want {
			t.Errorf("choose(%q) = %v, want %v", c.in, got, c.want)
		}
		if (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("choose(%q) error %v, want %q", c.in, err, c.wantErr)
		}
	}
}

// TestSelectedMatchesEnv proves the level forced through QWENREF_CPU is the
// one selected (scripts/test runs the suites once per level).
func TestSelectedMatchesEnv(t *testing.T) {
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	env := os.Getenv(EnvVar)
	if env == "" {
		if Selected() != Detected() {
			t.Fatalf("no override but selected %v, detected %v", Selected(), Detected())
		}
		return
	}
	if l, _ := ParseLevel(env); Selected() != l {
		t.Fatalf("%s=%s but selected %v", EnvVar, env, Selected())
	}
}
