package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// No CPU attention kernel holds T × T scores, so the estimate grows
// linearly with the tokens: doubling them at most doubles it (the pool's
// size classes may round a little either way). The old quadratic term
// made 2T cost about 4× T at these lengths. The products' scratch stops
// growing once x's rows fill a packing block (2,048 rows).
func TestEstimateMemoryLinear(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	for _, n := range []int{4096, 100_000, 1 << 20} {
		a, err := EstimateMemory(cfg, 1, n, 1)
		require.NoError(t, err)
		b, err := EstimateMemory(cfg, 1, 2*n, 1)
		require.NoError(t, err)
		r := float64(b.Total()-b.Scratch) / float64(a.Total()-a.Scratch)
		assert.InDelta(t, 2, r, 0.1, "%d → %d tokens: %s → %s", n, 2*n, a, b)
		assert.Equal(t, a.Scratch, b.Scratch, "%d → %d tokens: %s → %s", n, 2*n, a, b)
		assert.Positive(t, a.Scratch)
	}
}

// A recorded pass allocates every layer's buffers afresh, so it is
// charged more than the pooled one, by about the layers' buffers over all
// layers but one per kind.
func TestEstimateRecordedChargesFreshBuffers(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	const n = 4000
	plain, err := EstimateMemory(cfg, 1, n, n)
	require.NoError(t, err)
	rec, err := EstimateRecorded(cfg, 1, n, n)
	require.NoError(t, err)
	var perTok int64
	for _, k := range mixerKinds {
		if k == nil {
			continue
		}
		var w int64
		for _, b := range k.bufs(cfg) {
			w += b
		}
		perTok += w * int64(kindLayers(cfg, k.kind))
	}
	assert.GreaterOrEqual(t, rec.Activations-plain.Activations, (perTok/2)*n*4, "plain %s, recorded %s", plain, rec)
	assert.Equal(t, plain.Logits, rec.Logits)
}
