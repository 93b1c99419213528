package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// batchDecodeBar bounds the relative L2 distance between a row's logits from
// the batched decode step (cuBLAS GEMMs over the rows) and from the one-row
// step (the GEMVs): the two round their bf16 outputs at different places,
// which is bf16's bound, the bar TestModelMatchesCPU holds against the CPU.
// A row that read another row's cache or state is off by O(1).
const batchDecodeBar = 1e-2

// TestBatchRowsMatchOneRow runs B rows with different prompts through a
// model of B batch rows (a prefill each, then two decode steps of every
// row at once) and then each row alone on the same weights: the prefill
// logits must be equal bit for bit (the same kernels on each row's own
// caches), and each batched decode step within batchDecodeBar of the
// one-row step (bit for bit on the fp32 model, which steps its rows in
// turn); the first, a middle and the last row are checked. Dense and MoE layers, GDN and attention, at real widths; the MoE
// shapes route every token to all of a few experts, since which experts a
// token takes is a discrete choice that the two paths' bf16 rounding flips
// at near-ties (as TestModelMatchesCPU does; the router's ties are tested
// apart).
func TestBatchRowsMatchOneRow(t *testing.T) {
	d := need(t)
	cases := []struct {
		shape   string
		f32     bool
		experts int
		rows    int
	}{
		{"0.8b", false, 0, 3}, {"35b-a3b", false, 16, 3}, {"80b-a3b", false, 10, 3}, {"0.8b", true, 0, 3},
		{"35b-a3b", false, 16, 66}, // past MOE_GATHER_ROWS: the grouped expert GEMMs
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s-b%d", c.shape, c.rows)
		if c.f32 {
			name += "-fp32"
		}
		t.Run(name, func(t *testing.T) {
			cfg := fewLayers(t, c.shape, 4, 4096)
			if c.experts > 0 {
				cfg.MoE.NumExperts, cfg.MoE.NumExpertsPerTok = c.experts, c.experts
				cfg.MoE.MLPOnlyLayers = []int{1} // a dense layer between sparse ones
			}
			gm, err := d.newRandomModel(cfg, 2027, 128, c.f32)
			if err != nil {
				t.Fatal(err)
			}
			defer gm.Close()
			B := c.rows
			v := cfg.VocabSize
			r := rand.New(rand.NewPCG(5, 6))
			prompts := make([][]int, B)
			steps := [2][][]int{}
			for b := range prompts {
				prompts[b] = randomIDs(r, 37, v)
			}
			for s := range steps {
				for range B {
					steps[s] = append(steps[s], randomIDs(r, 1, v))
				}
			}
			if err := gm.batchRows(B); err != nil {
				t.Fatal(err)
			}
			batched := make([][]float32, 3)
			for i, ids := range [][][]int{prompts, steps[0], steps[1]} {
				batched[i] = make([]float32, B*v)
				if err := gm.forwardRows(ids, 1, batched[i]); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if pos, _, err := gm.Info(); err != nil || pos != 39 {
				t.Fatalf("position after the batch: %d (%v), want 39", pos, err)
			}
			if err := gm.setRows(1); err != nil {
				t.Fatal(err)
			}
			for _, b := range slices.Compact([]int{0, B / 2, B - 1}) {
				if err := gm.Reset(); err != nil {
					t.Fatal(err)
				}
				for i, ids := range [][]int{prompts[b], steps[0][b], steps[1][b]} {
					one, err := gm.Forward(ids, true)
					if err != nil {
						t.Fatal(err)
					}
					got := batched[i][b*v : (b+1)*v]
					rel := tensor.RelL2(got, one)
					t.Logf("row %d call %d: relL2 %.3g to the row alone", b, i, rel)
					switch {
					case i == 0 || c.f32:
						if !slices.Equal(got, one) {
							t.Errorf("row %d call %d: batched logits differ from the row alone (relL2 %.3g), want equal", b, i, rel)
						}
					case !(rel <= batchDecodeBar):
						t.Errorf("row %d decode step %d: relL2 %.3g to the row alone > %.0e", b, i, rel, batchDecodeBar)
					}
				}
			}
		})
	}
}

// TestBatchRowsRefuseBadInput: row counts outside the limits and ragged or
// out-of-vocabulary rows are refused with a message, before the device runs.
func TestBatchRowsRefuseBadInput(t *testing.T) {
	d := need(t)
	cfg := fewLayers(t, "0.8b", 4, 512)
	gm, err := d.newRandomModel(cfg, 1, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Close()
	for _, n := range []int{0, -1, MaxRows + 1} {
		if err := gm.batchRows(n); err == nil {
			t.Errorf("batchRows(%d) accepted", n)
		}
	}
	if err := gm.batchRows(2); err != nil {
		t.Fatal(err)
	}
	v := cfg.VocabSize
	bad := map[string][][]int{
		"ragged":          {{1, 2}, {3}},
		"id past vocab":   {{1}, {v}},
		"negative id":     {{-1}, {2}},
		"rows != model's": {{1}, {2}, {3}},
	}
	for what, ids := range bad {
		if err := gm.forwardRows(ids, 1, make([]float32, len(ids)*v)); err == nil {
			t.Errorf("%s: accepted", what)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	if err := gm.forwardRows(nil, 1, nil); err != model.ErrEmpty {
		t.Errorf("no rows: %v, want model.ErrEmpty", err)
	}
	if err := gm.forwardRows([][]int{{1}, {2}}, 1, make([]float32, 2*v)); err != nil {
		t.Errorf("a good call after the refusals: %v", err)
	}
}
