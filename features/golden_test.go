package features

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/goldens"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// TestTapsMatchTransformers captures every layer's tap and final_norm on
// the golden checkpoints (dense, MoE and Qwen3-Next) and holds each plane
// to transformers' own record of that layer's output and of the final
// norm, at the golden bars the chained residual stream is held to: the
// layer numbering and the pre/post-norm convention are transformers', not
// ours by assertion. A tap one layer off, or final taken after the norm,
// is off by far more than the bar (checked below on the first case). The
// rows of a batched case, packed into one forward, give the same bits.
func TestTapsMatchTransformers(t *testing.T) {
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	defer be.Close()
	roots := []string{filepath.Join("..", "testdata", "golden"), filepath.Join("..", "testdata", "golden", "moe")}
	ran := 0
	for _, root := range roots {
		cases, err := goldens.ReadManifest(root)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		for _, c := range cases {
			dir := filepath.Join(root, c.Name)
			t.Run(c.Name, func(t *testing.T) {
				checkTapsAgainstGolden(t, dir, be, ran == 0)
			})
			ran++
		}
	}
	require.NotZero(t, ran, "no golden case found")
}

func checkTapsAgainstGolden(t *testing.T, dir string, be *model.Backend, offByOne bool) {
	m, err := model.Load(dir)
	require.NoError(t, err)
	defer m.Close()
	exp, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
	require.NoError(t, err)
	defer exp.Close()
	in, err := goldens.ReadInputs(dir)
	require.NoError(t, err)
	r, err := model.NewRunner(m, be, 1)
	require.NoError(t, err)
	defer r.Close()
	n, h := m.Config.NumLayers, m.Config.HiddenSize
	taps := allTaps(n)
	// The batch's rows packed into one forward (each from position 0, seeing
	// only itself) give the same planes as their rows run one at a time.
	packed, err := CapturePacked(r, in.IDs, taps, h)
	require.NoError(t, err)
	at := 0
	for b, ids := range in.IDs {
		got := make([]float32, len(ids)*len(taps)*h)
		require.NoError(t, Capture(r, ids, taps, h, got))
		require.Equal(t, got, packed[at:at+len(got)], "%s row %d: packed with the other rows, the taps differ from the row alone", dir, b)
		at += len(got)
		for k, tp := range taps {
			w, _, err := exp.Float32(tp.Stage)
			require.NoError(t, err, tp.Stage)
			per := len(w) / len(in.IDs)
			want := w[b*per : (b+1)*per]
			e := tensor.CompareStage(plane(got, len(ids), len(taps), k, h), want)
			require.True(t, e.Within(tensor.GoldenTolerance), "%s row %d (tap %s): %+v against transformers' %s", dir, b, tp.Name, e, tp.Stage)
			if offByOne && b == 0 && k+1 < len(taps) {
				next := tensor.CompareStage(plane(got, len(ids), len(taps), k+1, h), want)
				require.False(t, next.Within(tensor.GoldenTolerance), fmt.Sprintf("the tap after %s also matches its golden: the check could not see an off-by-one", tp.Name))
			}
		}
	}
}
