package gateddelta_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/reference"
	"github.com/qwenref/qwenref/tensor"
	"github.com/stretchr/testify/require"
)

// TestErrorSweep measures how each float32 kernel's error against the
// float64 recurrence grows with sequence length, at the 27B head shapes
// (one key head and its three value heads, 128×128 states, a random
// initial state), for a mix of decay rates and for slowly decaying heads
// whose state sums ~10⁴ tokens. It takes a minute or two, so it runs only with
// QWENREF_SWEEP=1:
//
//	QWENREF_SWEEP=1 go test -run ErrorSweep -v ./layers/gateddelta/
//
// It prints a markdown table (docs/perf-gateddelta.md keeps one) and
// still holds every entry to tol32.
func TestErrorSweep(t *testing.T) {
	if os.Getenv("QWENREF_SWEEP") != "1" {
		t.Skip("set QWENREF_SWEEP=1 to run the error sweep")
	}
	lengths := []int{64, 256, 1024, 4096, 16384, 32768}
	for _, regime := range []struct {
		name       string
		aMin, aMax float64
	}{
		{"mixed decay (exp(a) in [e^-5, e^1.5])", -5, 1.5},
		{"slow decay (exp(a) in [e^-10, e^-8]: ~10^4-token memory)", -10, -8},
	} {
		var tab strings.Builder
		tab.WriteString("| T | naive out | naive state | chunked out | chunked state | recurrent out | recurrent state |\n")
		tab.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, T := range lengths {
			d := gateddelta.Dims{T: T, NK: 1, NV: 3, DK: 128, DV: 128}
			in, err := reference.NewGDNInputs(uint64(T), d, reference.GDNOptions{WithState: true, LogRateMin: regime.aMin, LogRateMax: regime.aMax})
			require.NoError(t, err)
			out64, st64 := exact(t, in)
			row := []string{fmt.Sprint(T)}
			for _, kern := range []gateddelta.Kernel{gateddelta.Naive{}, gateddelta.Chunked{}, gateddelta.Recurrent{}} {
				out, st := run(t, in, kern)
				eo, es := tensor.RelL2(out, out64), tensor.RelL2(st, st64)
				require.LessOrEqual(t, eo, tol32, "%T T=%d out", kern, T)
				require.LessOrEqual(t, es, tol32, "%T T=%d state", kern, T)
				row = append(row, fmt.Sprintf("%.2e", eo), fmt.Sprintf("%.2e", es))
			}
			tab.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
		t.Logf("%s, relative L2 error vs the float64 recurrence:\n%s", regime.name, tab.String())
	}
}
