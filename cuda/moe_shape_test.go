package cuda

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/model"
)

// TestMoEDecodeShapesAgree decodes the same tokens on the same weights in
// every launch shape of the gathered expert GEMVs (MoEDecodeShapeEnv): one
// row (the CUDA graph) and three rows at once, at the 35B-A3B and 80B-A3B
// widths with their own expert counts and top-k. Each lane sums its chunks
// in the same order in every shape, so the logits must be equal bit for
// bit; a shape that dropped a chunk, a row or a slot differs.
func TestMoEDecodeShapesAgree(t *testing.T) {
	d := need(t)
	for _, shape := range []string{"35b-a3b", "80b-a3b"} {
		for _, rows := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s-b%d", shape, rows), func(t *testing.T) {
				cfg := fewLayers(t, shape, 4, 4096)
				r := rand.New(rand.NewPCG(11, uint64(rows)))
				calls := [][][]int{make([][]int, rows), make([][]int, rows), make([][]int, rows), make([][]int, rows)}
				for b := range rows {
					calls[0][b] = randomIDs(r, 23, cfg.VocabSize)
					for i := 1; i < len(calls); i++ {
						calls[i][b] = randomIDs(r, 1, cfg.VocabSize)
					}
				}
				var want [][]float32
				for s := range MoEDecodeShapes {
					t.Setenv(MoEDecodeShapeEnv, strconv.Itoa(s))
					got := decodeCalls(t, d, cfg, rows, calls)
					if s == 0 {
						want = got
						continue
					}
					for i := range got {
						if !slices.Equal(got[i], want[i]) {
							t.Errorf("shape %d, call %d: logits differ from shape 0's", s, i)
						}
					}
				}
			})
		}
	}
}

// decodeCalls runs calls (a prefill, then one-token steps; each call a
// list of rows) on a fresh random model of cfg and returns each call's logits.
func decodeCalls(t *testing.T, d *Device, cfg *model.Config, rows int, calls [][][]int) [][]float32 {
	t.Helper()
	gm, err := d.newRandomModel(cfg, 2029, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Close()
	out := make([][]float32, len(calls))
	if rows == 1 {
		for i, c := range calls {
			if out[i], err = gm.Forward(c[0], true); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		return out
	}
	if err := gm.batchRows(rows); err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		out[i] = make([]float32, rows*cfg.VocabSize)
		if err := gm.forwardRows(c, 1, out[i]); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	return out
}

// TestMoEDecodeShapeEnvRefusesBadValues: a shape outside the library's
// range is refused with the variable's name, before any device work.
func TestMoEDecodeShapeEnvRefusesBadValues(t *testing.T) {
	for _, v := range []string{"-1", strconv.Itoa(MoEDecodeShapes), "x", "1.5"} {
		t.Setenv(MoEDecodeShapeEnv, v)
		_, err := moeDecodeShape()
		if err == nil || !strings.Contains(err.Error(), MoEDecodeShapeEnv) {
			t.Errorf("%s=%s: got %v, want an error naming the variable", MoEDecodeShapeEnv, v, err)
		}
	}
	t.Setenv(MoEDecodeShapeEnv, "")
	if s, err := moeDecodeShape(); err != nil || s != defaultMoEDecodeShape {
		t.Errorf("unset: shape %d, %v; want the default %d", s, err, defaultMoEDecodeShape)
	}
}

// TestBenchMoEDecodeShapes times the decode step (CUDA graph, position
// 2048) of one random model in every MoEDecodeShapeEnv shape, two rounds
// interleaved, re-planning the same weights between them; the shape of
// QWENREF_CUDA_MODEL_SHAPE (default 35b-a3b). Set QWENREF_CUDA_MODEL_BENCH=1.
func TestBenchMoEDecodeShapes(t *testing.T) {
	if os.Getenv("QWENREF_CUDA_MODEL_BENCH") == "" {
		t.Skip("set QWENREF_CUDA_MODEL_BENCH=1 to time the decode shapes")
	}
	d := need(t)
	shape := cmp.Or(os.Getenv("QWENREF_CUDA_MODEL_SHAPE"), "35b-a3b")
	cfg, err := model.ShapeConfig(shape)
	if err != nil {
		t.Fatal(err)
	}
	gm, err := d.newRandomModel(cfg, 2026, 2048+256, false)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Close()
	for round := range 2 {
		for s := range MoEDecodeShapes {
			t.Setenv(MoEDecodeShapeEnv, strconv.Itoa(s))
			steps, names, err := cPlan(cfg)
			if err == nil {
				d.mu.Lock()
				err = d.callLocked("model_plan", func() int { return cModelPlan(gm.h, steps, names) })
				d.mu.Unlock()
			}
			if err != nil {
				t.Fatal(err)
			}
			tm, err := gm.BenchDecode(2048, 100)
			if err != nil {
				t.Fatalf("shape %d: %v", s, err)
			}
			t.Logf("round %d %s decode shape %d: %.4f ms (%.4f–%.4f)", round, shape, s, tm.Median, tm.Min, tm.Max)
		}
	}
}
