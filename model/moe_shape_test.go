package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The 35b-a3b shape counts what its name says: about 35B parameters, about
// 3B of them active per token.
func TestShape35BA3BParams(t *testing.T) {
	cfg, err := ShapeConfig("35b-a3b")
	require.NoError(t, err)
	assert.Equal(t, 40, cfg.SparseLayers())
	total, active := cfg.TextParams(), cfg.ActiveTextParams()
	t.Logf("35b-a3b: %.2fB parameters, %.2fB active", float64(total)/1e9, float64(active)/1e9)
	assert.InDelta(t, 35e9, float64(total), 1.5e9)
	assert.InDelta(t, 3e9, float64(active), 0.6e9)
}

// The 80b-a3b shape (Qwen3NextConfig's defaults) counts about 80B
// parameters, about 3B active, every layer sparse, in the fused layout.
func TestShape80BA3BParams(t *testing.T) {
	cfg, err := ShapeConfig("80b-a3b")
	require.NoError(t, err)
	assert.Equal(t, "qwen3_next", cfg.ModelType)
	assert.Equal(t, 48, cfg.SparseLayers())
	_, full := cfg.CountLayers()
	assert.Equal(t, 12, full)
	total, active := cfg.TextParams(), cfg.ActiveTextParams()
	t.Logf("80b-a3b: %.2fB parameters, %.2fB active", float64(total)/1e9, float64(active)/1e9)
	assert.InDelta(t, 80e9, float64(total), 2e9)
	assert.InDelta(t, 3e9, float64(active), 0.9e9)
}
