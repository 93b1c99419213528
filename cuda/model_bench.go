package cuda

// The device model's benchmarks: prefill, decode and one mixer, timed by
// CUDA events inside the library.

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/model"
)

// PrefillStages names the Extra entries of BenchPrefill after tokens/s: the
// stage times (ms) of one profiled pass.
func PrefillStages() []string {
	var s []string
	for i := 0; ; i++ {
		n := cModelStageName(i)
		if n == "" {
			return s
		}
		s = append(s, n)
	}
}

func (m *residentModel) bench(what, t, variant, reps int) (Timing, error) {
	out := make([]float64, 24)
	err := m.dev.call(fmt.Sprintf("model_bench %d", what), func() int {
		return cModelBench(m.h, what, t, variant, reps, out)
	})
	if err != nil {
		return Timing{}, err
	}
	tm := Timing{Median: out[0], Min: out[1], Max: out[2]}
	for _, v := range out[3:] {
		if math.IsNaN(v) {
			break
		}
		tm.Extra = append(tm.Extra, v)
	}
	return tm, nil
}

// BenchPrefill times a prefill of t random tokens from an empty cache,
// logits for every position, after one warm-up: reps passes, each between
// two CUDA events. Extra[0] is tokens/s at the median, Extra[1:] the stage
// times of one profiled pass (PrefillStages). The state is reset.
func (m *residentModel) BenchPrefill(t, reps int) (Timing, error) { return m.bench(0, t, 0, reps) }

// BenchDecode prefills `prefill` random tokens, then times `steps` greedy
// decode steps as CUDA-graph replays (each between two events) after 3
// warm-up replays. Extra[0] is the median of 5 plain-launch steps, Extra[1]
// the weight bytes read per step over the graph median (GB/s), Extra[2:]
// the stage times (ms, PrefillStages' names) of one profiled plain-launch
// step, an event at every stage boundary.
func (m *residentModel) BenchDecode(prefill, steps int) (Timing, error) {
	return m.bench(1, prefill, steps, steps)
}

// BenchMixer times layer li's token mixer alone (the attention or GDN
// mixer between the block's two norms) on t rows of N(0, 1) normed input
// from an empty cache: reps passes after one warm-up, each between two
// CUDA events, the caches emptied between passes outside them. Extra[0]
// is tokens/s at the median. The state is reset.
func (m *residentModel) BenchMixer(li, t, reps int) (Timing, error) {
	if li < 0 || li >= m.cfg.NumLayers || t <= 0 || t > m.maxTokens || reps <= 0 {
		return Timing{}, fmt.Errorf("cuda: mixer bench: layer %d of %d, %d tokens (cache %d), %d reps",
			li, m.cfg.NumLayers, t, m.maxTokens, reps)
	}
	return m.bench(2, t, li, reps)
}

// BenchAttentionLayer times one gated attention token mixer of cfg's
// widths on the device (BenchMixer on a one-layer random model whose
// vocabulary is cut to 256, since only the mixer runs) for a prefill of t
// tokens, reps passes.
func (d *Device) BenchAttentionLayer(cfg *model.Config, t, reps int) (Timing, error) {
	one := oneLayer(cfg, model.FullAttention)
	if err := SupportsResident(one); err != nil {
		return Timing{}, err
	}
	m, err := d.newRandomModel(one, 2026, t, false)
	if err != nil {
		return Timing{}, err
	}
	defer m.Close()
	return m.BenchMixer(0, t, reps)
}

// oneLayer is cfg cut to one layer of the given kind, with a 256-token
// vocabulary and no special tokens: the model a single-mixer benchmark builds.
func oneLayer(cfg *model.Config, kind model.LayerKind) *model.Config {
	one := *cfg
	one.NumLayers = 1
	one.LayerTypes = []model.LayerKind{kind}
	one.VocabSize = 256
	one.EOSTokenIDs = nil
	return &one
}
