package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// A third kind of token mixer is one registration and one type: this test
// kind is the Gated DeltaNet under its own layer_types name and checkpoint
// prefix. A config that uses it parses, plans, estimates its memory and
// parameters, loads random weights and runs, through the registry alone,
// exactly as the same layer does as a linear_attention one.
const testMixerKind LayerKind = 2

type testMixer struct {
	Inner *gateddelta.Layer `tensor:"token_mixer."`
}

func (m *testMixer) gdn() *GDNMixer                                  { return &GDNMixer{m.Inner} }
func (m *testMixer) Kind() LayerKind                                 { return testMixerKind }
func (m *testMixer) NewState() MixerState                            { return m.gdn().NewState() }
func (m *testMixer) Matrices() []*tensor.Matrix                      { return m.gdn().Matrices() }
func (m *testMixer) Stages(t int) ([]tensor.Stage, tensor.StagePath) { return m.gdn().Stages(t) }
func (m *testMixer) step(op PlanOp, w *mixerWork, in, out []float32, t int, segs []int, st MixerState, be *Backend, rec tensor.Recorder) error {
	return m.gdn().step(op, w, in, out, t, segs, st, be, rec)
}

func registerTestMixer(t *testing.T) {
	gdn := mixerOf(LinearAttention)
	k := *gdn
	k.kind, k.name, k.title = testMixerKind, "test_mixer", "test mixer"
	k.build = func(cfg *Config) Mixer { return &testMixer{gdn.build(cfg).(*GDNMixer).Layer} }
	registerMixer(&k)
	t.Cleanup(func() { mixerKinds = mixerKinds[:testMixerKind] })
}

func TestThirdMixerKindIsOneRegistration(t *testing.T) {
	registerTestMixer(t)
	base, err := ParseConfig(fmt.Appendf(nil, recipeConfig, "qwen3_5_text"))
	require.NoError(t, err)
	js := strings.Replace(fmt.Sprintf(recipeConfig, "qwen3_5_text"), `["linear_attention","full_attention"`, `["test_mixer","full_attention"`, 1)
	cfg, err := ParseConfig([]byte(js))
	require.NoError(t, err)
	assert.Equal(t, "1 Gated DeltaNet, 1 attention, 1 test mixer", cfg.DescribeLayers())
	assert.Equal(t, "test_mixer", cfg.LayerTypes[0].String())
	assert.Equal(t, base.TextParams(), cfg.TextParams())
	mb, err := EstimateMemory(base, 2, 100, 1)
	require.NoError(t, err)
	mc, err := EstimateMemory(cfg, 2, 100, 1)
	require.NoError(t, err)
	assert.Equal(t, mb, mc)
	pb, err := Plan(base)
	require.NoError(t, err)
	pc, err := Plan(cfg)
	require.NoError(t, err)
	assert.Equal(t, pb, pc)
	var names []string
	for _, e := range cfg.ExpectedTensors() {
		names = append(names, e.Name)
	}
	assert.Contains(t, names, "layers.0.token_mixer.A_log")
	assert.NotContains(t, names, "layers.0.linear_attn.A_log")

	a, err := NewRandom(base, 4, false)
	require.NoError(t, err)
	b, err := NewRandom(cfg, 4, false)
	require.NoError(t, err)
	b.Blocks[0].Mixer.(*testMixer).Inner = a.Blocks[0].GDN() // the weights the other name drew
	be, err := ParseBackend("chunked")
	require.NoError(t, err)
	sa, sb := a.NewSession(), b.NewSession()
	for _, ids := range [][]int{{5, 9, 1, 77}, {3}, {60, 2}} {
		la, err := sa.Forward(ids, be, Options{})
		require.NoError(t, err)
		snap := sb.Snapshot()
		_, err = sb.Forward([]int{11, 12}, be, Options{})
		require.NoError(t, err)
		require.NoError(t, sb.Restore(snap))
		lb, err := sb.Forward(ids, be, Options{})
		require.NoError(t, err)
		require.Equal(t, la.Data, lb.Data)
	}
}

// A layer kind nothing registered is refused by the plan and the loader,
// not run.
func TestUnregisteredMixerKindIsRefused(t *testing.T) {
	cfg, err := ParseConfig(fmt.Appendf(nil, recipeConfig, "qwen3_5_text"))
	require.NoError(t, err)
	cfg.LayerTypes[1] = 7
	_, err = Plan(cfg)
	assert.ErrorContains(t, err, "plan: layer 1: no token mixer of kind 7")
	_, err = NewRandom(cfg, 1, false)
	assert.ErrorContains(t, err, "layer 1: no token mixer of kind 7")
	assert.Equal(t, "LayerKind(7)", cfg.LayerTypes[1].String())
	_, err = ParseConfig([]byte(strings.Replace(fmt.Sprintf(recipeConfig, "qwen3_5_text"), `"full_attention"`, `"sliding_attention"`, 1)))
	assert.ErrorContains(t, err, `layer_types[1] = "sliding_attention" (want linear_attention or full_attention)`)
}
