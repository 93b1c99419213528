package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/qwenref/qwenref/model"
)

// TestFP32ModelMatchesCPU runs the fp32 resident model (cuda-fp32) against
// the CPU's chunked backend on the same bf16 weights: a few full-width
// layers of the dense, MoE and Qwen3-Next shapes, and a dense shape with
// head dims the bf16 model refuses (GDN 64/96, attention 80). A prefill,
// two decode steps and a continuation must agree at relative L2 ≤ 1e-4
// (the end-to-end bar of the fp32 backends; both sides compute in fp32 from
// the same weights, so only the order of the sums differs), and greedy
// decoding must choose the tokens of the one-step forwards.
func TestFP32ModelMatchesCPU(t *testing.T) {
	d := need(t)
	for _, c := range []struct {
		name, shape string
		prompt      int
		experts     int // >0: cut the MoE to this many experts, every one of them routed
		heads       bool
	}{
		{"0.8b", "0.8b", 70, 0, false},
		{"35b-a3b", "35b-a3b", 90, 16, false},
		{"80b-a3b", "80b-a3b", 75, 10, false},
		{"odd-head-dims", "0.8b", 45, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fewLayers(t, c.shape, 4, 1024)
			if c.experts > 0 {
				// Every expert routed, as in TestModelMatchesCPU: the choice at
				// near-ties is the MoE goldens' to hold (ties included).
				cfg.MoE.NumExperts, cfg.MoE.NumExpertsPerTok = c.experts, c.experts
			}
			if c.heads {
				cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim, cfg.HeadDim = 64, 96, 80
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.heads && SupportsResident(cfg) == nil {
				t.Fatal("the bf16 model should refuse these head dims; the case tests what only fp32 takes")
			}
			hm, err := model.NewRandom(cfg, 11, true)
			if err != nil {
				t.Fatal(err)
			}
			gm, err := d.uploadModel(hm, 512, true)
			if err != nil {
				t.Fatal(err)
			}
			defer gm.Close()
			be, err := model.ParseBackend("chunked")
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(5, uint64(c.prompt)))
			ids := randomIDs(r, c.prompt+8, cfg.VocabSize)
			sess := hm.NewSession()
			for step, span := range [][2]int{{0, c.prompt}, {c.prompt, c.prompt + 1}, {c.prompt + 1, c.prompt + 2},
				{c.prompt + 2, c.prompt + 8}} {
				chunk := ids[span[0]:span[1]]
				want, err := sess.Forward(chunk, be, model.Options{})
				if err != nil {
					t.Fatal(err)
				}
				got, err := gm.Forward(chunk, false)
				if err != nil {
					t.Fatal(err)
				}
				check(t, fmt.Sprintf("fp32 model %s×4 step %d (T=%d at %d) vs chunked", c.name, step, len(chunk), span[0]),
					got, want.Data, 1e-4)
			}
			checkGreedyMatchesSteps(t, gm, ids[:c.prompt])
			pos, mem, err := gm.Info()
			if err != nil {
				t.Fatal(err)
			}
			est := EstimateMemoryFP32(cfg, 512, c.prompt, c.prompt)
			t.Logf("position %d; device bytes: weights %d (estimate %d), state %d (%d)", pos, mem.Weights, est.Weights,
				mem.State, est.State)
			// The states also hold the position and the argmax's scratch (a KiB).
			if mem.Weights != est.Weights || mem.State < est.State || mem.State > est.State+4096 {
				t.Errorf("EstimateMemoryFP32 is off: weights %d vs %d held, state %d vs %d", est.Weights, mem.Weights,
					est.State, mem.State)
			}
		})
	}
}

// TestFP32ModelRefusesDecodeBench: the fp32 model has no decode graph, and
// says so instead of timing something else.
func TestFP32ModelRefusesDecodeBench(t *testing.T) {
	d := need(t)
	cfg := fewLayers(t, "0.8b", 4, 1024)
	gm, err := d.newRandomModel(cfg, 3, 64, true)
	if err != nil {
		t.Fatal(err)
	}
	defer gm.Close()
	if _, err := gm.BenchDecode(8, 4); err == nil {
		t.Fatal("the fp32 model's decode benchmark ran")
	}
	if _, err := gm.BenchPrefill(16, 2); err != nil {
		t.Fatalf("the fp32 model's prefill benchmark: %v", err)
	}
}
