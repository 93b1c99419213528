package cuda

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/layers/moe"
	"github.com/qwenref/qwenref/model"
)

// TestMoERouteMatchesHost holds the device router (softmax, top-k,
// renormalisation) to the host's moe.Dims.Route on random logits: the same
// experts in the same order and weights within 2e-6 relative. Rows with exact ties
// at the k-th place are checked against the device's own rule, ties to the
// lower expert index (torch.topk on CUDA keeps the same set; on the CPU it
// follows libstdc++'s selection, which Route reproduces), and the test logs
// on how many of them the host's choice differs.
func TestMoERouteMatchesHost(t *testing.T) {
	d := need(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		t, e, k int
		norm    bool
	}{{50, 8, 2, true}, {40, 256, 8, true}, {30, 512, 10, false}, {9, 6, 6, true}, {20, 64, 64, false}, {3, 8192, 3, true}} {
		logits := make([]float32, c.t*c.e)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 3)
		}
		tied := map[int]bool{}
		for row := 0; row < c.t; row += 3 { // every third row: the k-th and (k+1)-th logits equal
			l := logits[row*c.e : (row+1)*c.e]
			order := rankDesc(l)
			if c.k < c.e {
				l[order[c.k]] = l[order[c.k-1]]
				tied[row] = true
			}
		}
		if c.t > 1 { // one row of equal logits
			l := logits[(c.t-1)*c.e : c.t*c.e]
			for i := range l {
				l[i] = 0.5
			}
			tied[c.t-1] = true // even at k = e: the order among equals is the tie rule's
		}
		ids, w, err := d.moeRoute(logits, c.t, c.e, c.k, c.norm)
		if err != nil {
			t.Fatal(err)
		}
		host := moe.Dims{Experts: c.e, TopK: c.k, NormTopK: c.norm}.Route(logits, c.t)
		hostDiffers := 0
		for row := range c.t {
			got, gw := ids[row*c.k:(row+1)*c.k], w[row*c.k:(row+1)*c.k]
			want, ww := host.Experts[row*c.k:(row+1)*c.k], host.Weights[row*c.k:(row+1)*c.k]
			if tied[row] {
				low := rankDesc(logits[row*c.e : (row+1)*c.e])[:c.k]
				for j := range low {
					if int(got[j]) != low[j] {
						t.Fatalf("e=%d k=%d row %d (tied): device chose %v, ties to the lower index give %v", c.e, c.k, row, got, low)
					}
				}
				if !sameSet(got, want) {
					hostDiffers++
				}
				continue
			}
			if !slices.Equal(got, want) {
				t.Fatalf("e=%d k=%d row %d: device chose %v, host %v", c.e, c.k, row, got, want)
			}
			for j := range gw {
				if math.Abs(float64(gw[j]-ww[j])) > 2e-6*math.Abs(float64(ww[j]))+1e-12 {
					t.Fatalf("e=%d k=%d row %d weight %d: device %.9g, host %.9g", c.e, c.k, row, j, gw[j], ww[j])
				}
			}
		}
		t.Logf("e=%d k=%d norm=%v: %d rows, %d with a tie at the k-th place; the host's (torch CPU) choice differs on %d of them",
			c.e, c.k, c.norm, c.t, len(tied), hostDiffers)
	}
}

// rankDesc is the indices of l by descending value, ties to the lower index.
func rankDesc(l []float32) []int {
	idx := make([]int, len(l))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(l[b], l[a]) })
	return idx
}

func sameSet(a, b []int32) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// The resident backend holds the released sparse shapes and names what it
// cannot hold (no GPU needed).
func TestSupportsResidentMoE(t *testing.T) {
	for _, shape := range []string{"35b-a3b", "80b-a3b"} {
		cfg, err := model.ShapeConfig(shape)
		if err != nil {
			t.Fatal(err)
		}
		if err := SupportsResident(cfg); err != nil {
			t.Errorf("%s: %v", shape, err)
		}
	}
	for _, c := range []struct {
		name string
		edit func(*model.Config)
		want string
	}{
		{"too many experts", func(c *model.Config) { c.MoE.NumExperts = 9000 }, "up to 8192 experts"},
		{"top-k over 64", func(c *model.Config) { c.MoE.NumExperts, c.MoE.NumExpertsPerTok = 512, 65 }, "top-64"},
		{"odd expert width", func(c *model.Config) { c.MoE.IntermediateSize = 500 }, "multiples of 8"},
		{"odd shared width", func(c *model.Config) { c.MoE.SharedIntermediate = 20 }, "shared_expert_intermediate_size 20"},
	} {
		cfg, err := model.ShapeConfig("35b-a3b")
		if err != nil {
			t.Fatal(err)
		}
		c.edit(cfg)
		err = SupportsResident(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// The memory estimate counts a sparse model's weights as its parameters in
// bf16 (the small fp32 vectors and the router's padding aside).
func TestEstimateMemoryMoE(t *testing.T) {
	for _, shape := range []string{"35b-a3b", "80b-a3b"} {
		cfg, err := model.ShapeConfig(shape)
		if err != nil {
			t.Fatal(err)
		}
		est := EstimateMemory(cfg, 8192, 8192, 1)
		params := 2 * cfg.TextParams()
		if rel := math.Abs(float64(est.Weights-params)) / float64(params); rel > 2e-3 {
			t.Errorf("%s: weights %d bytes, parameters in bf16 %d (%.2g apart)", shape, est.Weights, params, rel)
		}
		if est.Activations <= 0 || est.State <= 0 {
			t.Errorf("%s: %s", shape, est)
		}
		t.Logf("%s: %s", shape, est)
	}
}
