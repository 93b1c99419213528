package gateddelta

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/stretchr/testify/require"
)

// TestForcedLevelRuns starts this test binary once per level the CPU has,
// with QWENREF_CPU set to it, and checks from the child's report that the
// kernels it runs are that level's.
func TestForcedLevelRuns(t *testing.T) {
	if os.Getenv("GATEDDELTA_REPORT_LEVEL") == "1" {
		return // the child's own copy of this test has nothing to check
	}
	for _, l := range cpu.Supported() {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReportLevel$", "-test.v")
		cmd.Env = append(os.Environ(), cpu.EnvVar+"="+l.String(), "GATEDDELTA_REPORT_LEVEL=1")
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(err.Error(), "exec format error") {
			t.Skip("this binary runs under an emulator (go test -exec) and cannot start itself")
		}
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "kernels: "+l.String()+": ", "QWENREF_CPU=%s", l)
		line, _, _ := strings.Cut(string(out)[strings.Index(string(out), "kernels: "):], "\n")
		t.Logf("QWENREF_CPU=%s: %s", l, line)
	}
}

// TestReportLevel prints the kernels in use; TestForcedLevelRuns reads it.
func TestReportLevel(t *testing.T) {
	if os.Getenv("GATEDDELTA_REPORT_LEVEL") != "1" {
		t.Skip("run by TestForcedLevelRuns")
	}
	require.NoError(t, cpu.Check())
	require.Equal(t, cpu.Selected(), active.level)
	t.Logf("kernels: %s", KernelInfo())
	require.True(t, strings.HasPrefix(KernelInfo(), cpu.Selected().String()+": "))
}
