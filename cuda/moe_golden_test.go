package cuda

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/weights"
)

// TestMoERouteOnGoldenRows runs the device router on the router logits that
// transformers recorded in every MoE golden (testdata/golden/moe) and
// compares its experts with the ones transformers chose. Rows without a tie
// must agree exactly, in order; rows with equal logits inside the top k must
// choose the same set (their order is the tie rule's). Rows with a tie at the
// k-th place (the generator builds some) are where the two rules may part: the device keeps
// the lower expert index, as torch.topk on CUDA does, while transformers'
// CPU run followed torch's CPU selection, which the host router
// (moe.Dims.Route, what cuda-fp32 uses) reproduces. The test fails if the
// host router does not match transformers on every row, and logs how many
// tied rows the device routes differently.
func TestMoERouteOnGoldenRows(t *testing.T) {
	d := need(t)
	root := filepath.Join("..", "testdata", "golden", "moe")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "expected.safetensors"))
	if err != nil || len(dirs) == 0 {
		t.Skip("testdata/golden/moe has not been generated")
	}
	totalTied, totalDiffer := 0, 0
	for _, path := range dirs {
		dir := filepath.Dir(path)
		cfg, err := model.LoadConfig(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		exp, err := weights.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		mc := cfg.MoE
		dims := moe.Dims{Hidden: cfg.HiddenSize, Experts: mc.NumExperts, TopK: mc.NumExpertsPerTok, NormTopK: mc.NormTopKProb}
		e, k := dims.Experts, dims.TopK
		names := exp.Names()
		for li := range cfg.LayerTypes {
			name := fmt.Sprintf("layers.%d.router_logits", li)
			if !cfg.SparseLayer(li) || !slices.Contains(names, name) {
				continue
			}
			logits, _, err := exp.Float32(name)
			if err != nil {
				t.Fatal(err)
			}
			chosen, _, err := exp.Float32(fmt.Sprintf("layers.%d.router_experts", li))
			if err != nil {
				t.Fatal(err)
			}
			rows := len(logits) / e
			if rows*e != len(logits) || len(chosen) != rows*k {
				t.Fatalf("%s layer %d: %d logits and %d experts for E = %d, k = %d", dir, li, len(logits), len(chosen), e, k)
			}
			ids, _, err := d.moeRoute(logits, rows, e, k, dims.NormTopK)
			if err != nil {
				t.Fatal(err)
			}
			host := dims.Route(logits, rows)
			tied, differ, reordered := 0, 0, 0
			for row := range rows {
				want := make([]int32, k)
				for j := range k {
					want[j] = int32(chosen[row*k+j])
				}
				if got := host.Experts[row*k : (row+1)*k]; !sameSet(got, want) {
					t.Fatalf("%s layer %d row %d: the host router chose %v, transformers %v", filepath.Base(dir), li, row, got, want)
				}
				got := ids[row*k : (row+1)*k]
				l := logits[row*e : (row+1)*e]
				order := rankDesc(l)
				if k < e && l[order[k]] == l[order[k-1]] { // the set itself depends on the tie rule
					tied++
					if !sameSet(got, want) {
						differ++
					}
					continue
				}
				inner := false // equal logits inside the top k: the same set, their order the rule's
				for j := 0; j+1 < k; j++ {
					inner = inner || l[order[j]] == l[order[j+1]]
				}
				if inner {
					reordered++
					if !sameSet(got, want) {
						t.Fatalf("%s layer %d row %d (a tie inside the top k): device chose %v, transformers %v", filepath.Base(dir), li, row, got, want)
					}
					continue
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s layer %d row %d (no tie): device chose %v, transformers %v", filepath.Base(dir), li, row, got, want)
				}
			}
			if tied+reordered > 0 {
				t.Logf("%s layer %d: %d rows; %d tied at the k-th place, where the device's set differs from transformers' on %d; %d with a tie inside the top k (same set)",
					filepath.Base(dir), li, rows, tied, differ, reordered)
			}
			totalTied += tied
			totalDiffer += differ
		}
		exp.Close()
	}
	t.Logf("all goldens: %d tied rows, the device differs from transformers on %d (the host router, cuda-fp32's, on none)", totalTied, totalDiffer)
}
