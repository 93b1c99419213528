package bench

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// Every backend scores the same windows; the first is the reference, the
// others carry their difference from it, and the pooled count covers
// every row.
func TestPerplexityAcrossBackends(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	m, err := model.NewRandom(cfg, 3, false)
	require.NoError(t, err)
	rows := [][]int{{1, 5, 9, 2, 7, 3}, {4, 4, 8, 1, 0, 6}}
	run, err := Perplexity(m, []string{"chunked", "naive"}, rows, 4, 2, nil)
	require.NoError(t, err)
	assert.Equal(t, 12, run.Tokens)
	assert.Equal(t, 2, run.Rows)
	require.Len(t, run.Results, 2)
	ref, other := run.Results[0], run.Results[1]
	assert.Nil(t, ref.DeltaMeanNLL, "the reference has no difference from itself")
	assert.Equal(t, 2*5, ref.Scored, "every token but each row's first is scored")
	assert.Equal(t, ref.Scored, other.Scored)
	assert.InDelta(t, math.Exp(ref.MeanNLL), ref.Perplexity, 1e-12)
	require.NotNil(t, other.DeltaMeanNLL)
	assert.InDelta(t, other.MeanNLL-ref.MeanNLL, *other.DeltaMeanNLL, 1e-15)
	assert.Less(t, *other.MaxAbsTokenNLL, 1e-4, "naive and chunked agree within fp32 rounding")
	var b bytes.Buffer
	require.NoError(t, run.WriteText(&b))
	assert.Contains(t, b.String(), "12 tokens in 2 row(s), windows of 4 advanced by 2")
	assert.Contains(t, b.String(), "naive vs chunked: Δ mean NLL")
	_, err = Perplexity(m, []string{"nosuch"}, rows, 4, 2, nil)
	assert.ErrorContains(t, err, `unknown backend "nosuch"`)
}
