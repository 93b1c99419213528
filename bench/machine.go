package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/qwenref/qwenref/model"
)

// Machine names the CPU, the Go build and the parallelism, for Meta.Machine.
func Machine() string {
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	s := fmt.Sprintf("%s/%s, %s, %d CPUs, GOMAXPROCS=%d, %s", runtime.GOOS, runtime.GOARCH, cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			if (st.Key == "GOEXPERIMENT" || st.Key == "-tags") && st.Value != "" {
				s += fmt.Sprintf(", %s=%s", st.Key, st.Value)
			}
		}
	}
	return s
}

// ShellJoin quotes args for a copy-pasteable command line (Meta.Command).
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?;&|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// AvailableBackends keeps the named backends that open on this machine (a
// build with the cuda backends on a machine without a GPU skips them),
// telling w which it skips and why.
func AvailableBackends(names []string, w io.Writer) []string {
	var ok, reasons []string
	skipped := map[string][]string{} // by reason: a missing GPU is one line
	for _, n := range names {
		be, err := model.ParseBackend(n)
		if err != nil {
			if skipped[err.Error()] == nil {
				reasons = append(reasons, err.Error())
			}
			skipped[err.Error()] = append(skipped[err.Error()], n)
			continue
		}
		be.Close()
		ok = append(ok, n)
	}
	for _, why := range reasons {
		fmt.Fprintf(w, "bench: skipping %s %s: %s\n", map[bool]string{true: "backend", false: "backends"}[len(skipped[why]) == 1], strings.Join(skipped[why], ", "), why)
	}
	return ok
}

// DefaultMaxMemoryGiB is the default bound on the random weights a sweep
// builds: 75% of the machine's memory (16 GiB if unknown).
func DefaultMaxMemoryGiB() float64 {
	if b := model.TotalMemory(); b > 0 {
		return float64(b) * 0.75 / (1 << 30)
	}
	return 16
}

// QuickFallbackMix is the backend the quick sweep adds beside the
// registered ones: what transformers runs without the fused GDN kernels
// of flash-linear-attention and causal-conv1d, the penalty in question.
const QuickFallbackMix = "chunked:delta=naive:conv=naive"

// QuickSweep applies the quick default sweep's sizes (the 0.8b shape at
// T = 128 and 512, naive only for calls of at most 1 GFLOP, each case
// stopped after 5 s) when set, the flags a command line gave, sizes
// nothing (seq, shape, model, config), keeping the flags given; it
// reports whether it did. Choosing ops or backends keeps the sizes quick.
func QuickSweep(set map[string]bool, shape, seqs *string, naiveMax *float64, maxTime *time.Duration) bool {
	for _, f := range []string{"seq", "shape", "model", "config"} {
		if set[f] {
			return false
		}
	}
	*shape, *seqs = "0.8b", "128,512"
	if !set["naive-max-gflop"] {
		*naiveMax = 1
	}
	if !set["max-time"] {
		*maxTime = 5 * time.Second
	}
	return true
}
