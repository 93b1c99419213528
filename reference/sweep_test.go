package reference

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// bf16State is the gated delta rule with its state rounded to bf16 after
// every token, as a kernel that keeps the state in bf16 would: the
// tolerance study's example of what bf16 storage costs.
type bf16State struct{}

func (bf16State) Forward(out, q, k, v, g, beta []float32, d gateddelta.Dims, state []float32) error {
	if err := d.Check(out, q, k, v, g, beta, state); err != nil {
		return err
	}
	qk, hv := d.NK*d.DK, d.NV*d.DV
	for t := 0; t < d.T; t++ {
		one := gateddelta.Dims{T: 1, NK: d.NK, NV: d.NV, DK: d.DK, DV: d.DV}
		if err := (gateddelta.Naive{}).Forward(out[t*hv:(t+1)*hv], q[t*qk:(t+1)*qk], k[t*qk:(t+1)*qk], v[t*hv:(t+1)*hv],
			g[t*d.NV:(t+1)*d.NV], beta[t*d.NV:(t+1)*d.NV], one, state); err != nil {
			return err
		}
		if err := RoundTo("bf16", state); err != nil {
			return err
		}
	}
	return nil
}

// TestToleranceSweep measures each kernel's error against the float64
// reference computed from the same rounded inputs, per input dtype,
// sequence length and chunk size, at the 27B head shape (one key head,
// three value heads, 128×128 states, a random initial state). Every
// float32 kernel must stay within the golden bar whatever the input
// dtype; the table (docs/tolerances.md) also shows what storing the
// output, or the state, in bf16 costs. QWENREF_SWEEP=1 adds T = 1024 and 4096.
//
//	QWENREF_SWEEP=1 go test -run ToleranceSweep -v ./reference/
func TestToleranceSweep(t *testing.T) {
	lengths := []int{64, 256}
	if os.Getenv("QWENREF_SWEEP") == "1" {
		lengths = append(lengths, 1024, 4096)
	}
	kernels := []struct {
		name string
		k    gateddelta.Kernel
	}{
		{"naive", gateddelta.Naive{}}, {"recurrent", gateddelta.Recurrent{}},
		{"chunked16", gateddelta.Chunked{ChunkSize: 16}}, {"chunked32", gateddelta.Chunked{ChunkSize: 32}},
		{"chunked64", gateddelta.Chunked{ChunkSize: 64}}, {"chunked128", gateddelta.Chunked{ChunkSize: 128}},
	}
	var tab strings.Builder
	tab.WriteString("| inputs | T |")
	for _, k := range kernels {
		tab.WriteString(" " + k.name + " |")
	}
	tab.WriteString(" out stored in the dtype | bf16 state |\n|---|---:|" + strings.Repeat("---:|", len(kernels)+2) + "\n")
	for _, dtype := range DTypes {
		for _, T := range lengths {
			d := gateddelta.Dims{T: T, NK: 1, NV: 3, DK: 128, DV: 128}
			in, err := NewGDNInputs(uint64(T), d, GDNOptions{WithState: true})
			require.NoError(t, err)
			for _, x := range [][]float32{in.Q, in.K, in.V, in.G, in.Beta, in.State} {
				require.NoError(t, RoundTo(dtype, x))
			}
			want, _, err := in.Reference()
			require.NoError(t, err)
			row := []string{dtype, fmt.Sprint(T)}
			for _, k := range kernels {
				out, _, err := in.Run(k.k)
				require.NoError(t, err)
				e := tensor.CompareStage(out, Narrow(want))
				require.True(t, e.Within(tensor.GoldenTolerance), "%s on %s inputs, T=%d: rel L2 %.2e", k.name, dtype, T, e.RelL2)
				row = append(row, fmt.Sprintf("%.1e", e.RelL2))
			}
			stored := Narrow(want)
			require.NoError(t, RoundTo(dtype, stored))
			row = append(row, fmt.Sprintf("%.1e", RelL2(stored, want)))
			if T <= 1024 {
				out, _, err := in.Run(bf16State{})
				require.NoError(t, err)
				row = append(row, fmt.Sprintf("%.1e", RelL2(out, want)))
			} else {
				row = append(row, "–")
			}
			tab.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	t.Logf("relative L2 error of out against the float64 reference of the same rounded inputs:\n%s", tab.String())
}
