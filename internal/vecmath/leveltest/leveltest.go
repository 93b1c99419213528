// Package leveltest holds the kernel-level checks that the packages with
// assembly kernels (vecmath, conv1d, attention) share in their tests: that
// the kernels in use are the level internal/cpu selected, and that each
// QWENREF_CPU value this CPU has selects its own.
package leveltest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
)

// CheckSelected asserts that info (a package's KernelInfo) names the
// selected level for the kernels of pkg, and for vecmath's where info
// lists them; under QWENREF_CPU it also asserts the override took effect.
func CheckSelected(t *testing.T, pkg, info string) {
	t.Helper()
	lv := cpu.Selected().String()
	assert.True(t, strings.HasPrefix(info, pkg+":"+lv), "%s at level %s", info, lv)
	if pkg != "vecmath" {
		assert.Contains(t, info, "vecmath:"+lv)
	}
	if want := os.Getenv(cpu.EnvVar); want != "" {
		assert.Equal(t, want, lv, "%s was not applied", cpu.EnvVar)
	}
}

// RunForced re-runs the test binary's test named test (one that calls
// CheckSelected) under QWENREF_CPU set to each level this CPU has. It
// skips in the child runs, and where the binary cannot run itself (an
// emulated GOARCH).
func RunForced(t *testing.T, test string) {
	t.Helper()
	if os.Getenv(cpu.EnvVar) != "" {
		t.Skip("already a child run")
	}
	for _, l := range cpu.Supported() {
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s", cpu.EnvVar, l))
		out, err := cmd.CombinedOutput()
		if errors.Is(err, syscall.ENOEXEC) {
			t.Skipf("cannot run the test binary as a child here (an emulated GOARCH?): %v", err)
		}
		require.NoError(t, err, "%s=%s:\n%s", cpu.EnvVar, l, out)
		assert.Contains(t, string(out), "--- PASS: "+test, "%s=%s", cpu.EnvVar, l)
	}
}
