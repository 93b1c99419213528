package model

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The plan records what the CPU forward records, in its order: its stage
// names, read step by step, are Model.Stages without the logits (which a
// device hands back as its result). Every op sits on a layer of its kind.
func TestPlanRecordsModelStages(t *testing.T) {
	for name, cfg := range familyConfigs(t) {
		m, err := NewRandom(cfg, 3, false)
		require.NoError(t, err, name)
		plan, err := Plan(cfg)
		require.NoError(t, err, name)
		var got []string
		for _, s := range plan {
			got = append(got, s.Stages...)
		}
		var want []string
		for _, s := range m.Stages(5) {
			if s.Name != stageLogits {
				want = append(want, s.Name)
			}
		}
		assert.Equal(t, want, got, name)

		require.Equal(t, OpEmbed, plan[0].Op, name)
		require.Equal(t, OpLMHead, plan[len(plan)-1].Op, name)
		sparseLayers := 0
		for i, s := range plan {
			require.Less(t, s.Layer, cfg.NumLayers, "%s step %d", name, i)
			switch {
			case s.Op == OpEmbed || s.Op == OpLMHead:
				assert.Equal(t, -1, s.Layer, "%s step %d", name, i)
			case s.Op == OpNorm && s.Layer < 0:
				assert.Equal(t, NormFinal, s.Norm, "%s step %d", name, i)
			case s.Op == OpNorm:
				assert.Contains(t, []NormWeight{NormInput, NormPost}, s.Norm, "%s step %d", name, i)
			case s.Op >= OpGDNInProj && s.Op <= OpGDNOut:
				assert.Equal(t, LinearAttention, cfg.LayerTypes[s.Layer], "%s step %d: %s", name, i, s.Op)
			case s.Op >= OpAttnQKV && s.Op <= OpAttnOut:
				assert.Equal(t, FullAttention, cfg.LayerTypes[s.Layer], "%s step %d: %s", name, i, s.Op)
			case s.Op == OpMLPGateUp || s.Op == OpMLPDown:
				assert.False(t, cfg.SparseLayer(s.Layer), "%s step %d: %s", name, i, s.Op)
			case s.Op >= OpMoERoute && s.Op <= OpMoECombine:
				assert.True(t, cfg.SparseLayer(s.Layer), "%s step %d: %s", name, i, s.Op)
				if s.Op == OpMoERoute {
					sparseLayers++
				}
			}
			for _, st := range s.Stages {
				if s.Layer >= 0 {
					assert.True(t, strings.HasPrefix(st, "layers."), "%s step %d: %s", name, i, st)
				}
			}
		}
		wantSparse := 0
		for l := range cfg.NumLayers {
			if cfg.SparseLayer(l) {
				wantSparse++
			}
		}
		assert.Equal(t, wantSparse, sparseLayers, name)
		assert.Contains(t, plan[0].Op.String(), "embed")
		assert.Equal(t, "PlanOp(99)", PlanOp(99).String())
	}
}

// A config whose layer types do not cover its layers gets an error, not a
// plan that reads past them.
func TestPlanRefusesBrokenConfig(t *testing.T) {
	_, err := Plan(nil)
	require.Error(t, err)
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.LayerTypes = cfg.LayerTypes[:2]
	_, err = Plan(cfg)
	require.ErrorContains(t, err, "layer types")
}
