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

// TestDecodeShapesAgree decodes the same tokens on the same weights in
// every launch shape of the decode GEMVs (GEMVShapeEnv) and of the
// gathered expert GEMVs (MoEDecodeShapeEnv): one row (the CUDA graph) and
// three rows at once, at the 27B, 35B-A3B and 80B-A3B widths (the sparse
// ones with their own expert counts and top-k). Each lane sums its chunks
// in the same order in every shape, so the logits must be equal bit for
// bit; a shape that dropped a chunk, a row or a slot differs.
func TestDecodeShapesAgree(t *testing.T) {
	d := need(t)
	for _, shape := range []string{"27b", "35b-a3b", "80b-a3b"} {
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
				t.Setenv(GEMVShapeEnv, "0")
				t.Setenv(MoEDecodeShapeEnv, "0")
				want := decodeCalls(t, d, cfg, rows, calls)
				for _, v := range []struct {
					env string
					n   int
				}{{GEMVShapeEnv, GEMVShapes}, {MoEDecodeShapeEnv, MoEDecodeShapes}} {
					if v.env == MoEDecodeShapeEnv && !cfg.IsMoE() {
						continue
					}
					for s := 1; s < v.n; s++ {
						t.Setenv(v.env, strconv.Itoa(s))
						got := decodeCalls(t, d, cfg, rows, calls)
						for i := range got {
							if !slices.Equal(got[i], want[i]) {
								t.Errorf("%s=%d, call %d: logits differ from shape 0's", v.env, s, i)
							}
						}
					}
					t.Setenv(v.env, "0")
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

// TestLaunchShapeEnvRefusesBadValues: a shape outside the library's range
// is refused with the variable's name, before any device work.
func TestLaunchShapeEnvRefusesBadValues(t *testing.T) {
	for _, v := range []struct {
		env    string
		n, def int
	}{{MoEDecodeShapeEnv, MoEDecodeShapes, defaultMoEDecodeShape}, {GEMVShapeEnv, GEMVShapes, defaultGEMVShape}} {
		for _, bad := range []string{"-1", strconv.Itoa(v.n), "x", "1.5"} {
			t.Setenv(v.env, bad)
			if _, _, err := cPlan(fewLayers(t, "35b-a3b", 4, 512)); err == nil || !strings.Contains(err.Error(), v.env) {
				t.Errorf("%s=%s: got %v, want an error naming the variable", v.env, bad, err)
			}
		}
		t.Setenv(v.env, "")
		if s, err := launchShape(v.env, v.n, v.def); err != nil || s != v.def {
			t.Errorf("%s unset: shape %d, %v; want the default %d", v.env, s, err, v.def)
		}
	}
}

// TestBenchDecodeShapes times the decode step (CUDA graph, position 2048)
// of one random model of QWENREF_CUDA_MODEL_SHAPE (default 35b-a3b) in
// every GEMVShapeEnv shape and, for a sparse model, every
// MoEDecodeShapeEnv shape (the other variable at its default), two rounds
// interleaved, re-planning the same weights between them. Set
// QWENREF_CUDA_MODEL_BENCH=1.
func TestBenchDecodeShapes(t *testing.T) {
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
	vars := []struct {
		env string
		n   int
	}{{GEMVShapeEnv, GEMVShapes}}
	if cfg.IsMoE() {
		vars = append(vars, struct {
			env string
			n   int
		}{MoEDecodeShapeEnv, MoEDecodeShapes})
	}
	for round := range 2 {
		for _, v := range vars {
			for s := range v.n {
				t.Setenv(v.env, strconv.Itoa(s))
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
					t.Fatalf("%s=%d: %v", v.env, s, err)
				}
				t.Logf("round %d %s decode %s %d: %.4f ms (%.4f–%.4f)", round, shape, v.env, s, tm.Median, tm.Min, tm.Max)
			}
			t.Setenv(v.env, "")
		}
	}
}
