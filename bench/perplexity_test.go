package bench

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/generate"
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
	var b bytes.Buffer
	run, err := Perplexity(m, []string{"chunked", "naive"}, rows, PerplexityOptions{Ctx: 4, Stride: 2, Running: &b})
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
	require.NoError(t, run.WriteComparison(&b))
	assert.Contains(t, b.String(), "12 tokens in 2 rows, windows of 4 advanced by 2\nchunked: [1]")
	assert.Contains(t, b.String(), "naive vs chunked: Δ mean NLL")
	_, err = Perplexity(m, []string{"nosuch"}, rows, PerplexityOptions{Ctx: 4, Stride: 2})
	assert.ErrorContains(t, err, `unknown backend "nosuch"`)
}

// The running estimate and the standard error are llama-perplexity's: after
// window k, exp of the mean NLL of every token scored so far; the error
// √((E[nll²] − E[nll]²)/(n − 1)) of the NLLs, times the perplexity.
func TestPerplexityLikeLlamaCpp(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	m, err := model.NewRandom(cfg, 5, false)
	require.NoError(t, err)
	rows := [][]int{{1, 5, 9, 2, 7, 3, 8, 8, 4}, {4, 4, 8, 1, 0, 6}}
	var b bytes.Buffer
	run, err := Perplexity(m, []string{"chunked"}, rows, PerplexityOptions{Ctx: 4, Stride: 3, Running: &b})
	require.NoError(t, err)
	be, _ := model.ParseBackend("chunked")
	var all []float64
	want := "15 tokens in 2 rows, windows of 4 advanced by 3\nchunked: "
	k, done := 0, 0.0 // the rows' sums so far, added as Perplexity adds them
	for _, ids := range rows {
		res, err := generate.Perplexity(m, ids, be, 4, 3, nil)
		require.NoError(t, err)
		ws, err := generate.PerplexityWindows(len(ids), 4, 3)
		require.NoError(t, err)
		row := 0.0
		for _, w := range ws {
			all = append(all, res.NLL[w.First:w.End]...)
			for _, v := range res.NLL[w.First:w.End] {
				row += v
			}
			k++
			want += fmt.Sprintf("[%d]%.4f,", k, math.Exp((done+row)/float64(len(all))))
		}
		done += row
	}
	var s, s2 float64
	for _, v := range all {
		s, s2 = s+v, s2+v*v
	}
	n := float64(len(all))
	se := math.Sqrt((s2/n - (s/n)*(s/n)) / (n - 1))
	r := run.Results[0]
	assert.InEpsilon(t, se, r.MeanNLLStdErr, 1e-12)
	assert.InEpsilon(t, se*math.Exp(s/n), r.PerplexityStdErr, 1e-12)
	assert.Equal(t, len(all), r.Scored)
	want += fmt.Sprintf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.Perplexity, r.PerplexityStdErr)
	assert.True(t, strings.HasPrefix(b.String(), want), "%q\nwant prefix %q", b.String(), want)
}
